"""Issue 25 (second round): the temporary files a killed writer leaves in the telemetry sample
store are removed by the next append (their writer's process is gone, or they are hours old) and
reported in one line; a live writer's temporary file is kept. Real files, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from telemetry.store import _HOST, STALE_TEMPORARY_SECONDS, SampleStore
from tests.test_telemetry_store import hand_frame

ID = "0123456789abcdef0123456789abcdef"


def _killed_writer(folder: Path) -> tuple[int, Path]:
    """A process that opens a temporary the way the store names it, writes half a file and is
    killed with SIGKILL (no `finally` runs): the orphan of issue 25."""
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time; p = sys.argv[1] + f'/.part-{sys.argv[2]}-{os.getpid()}-{sys.argv[3]}.tmp'; "
         "open(p, 'wb').write(b'PAR1 half a file'); print(p, flush=True); time.sleep(60)",
         str(folder), _HOST, ID],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stdout is not None
    path = Path(child.stdout.readline().strip())
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    return child.pid, path


def test_a_killed_writers_temporary_is_removed_by_the_next_append_a_live_ones_kept(tmp_path: Path) -> None:
    store = SampleStore.from_url(str(tmp_path / "store"))
    store.append(hand_frame(), "first")
    folder = tmp_path / "store" / "samples" / "day=2026-11-30"
    dead_pid, orphan = _killed_writer(folder)
    assert orphan.is_file()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        held = folder / f".part-{_HOST}-{live.pid}-{ID}.tmp"  # a writer still at work
        held.write_bytes(b"PAR1 being written")
        old_legacy = folder / f".part-{'a' * 32}.tmp"  # the name before pids: decided by age
        old_legacy.write_bytes(b"PAR1")
        hours_ago = time.time() - STALE_TEMPORARY_SECONDS - 3600
        os.utime(old_legacy, (hours_ago, hours_ago))
        fresh_legacy = folder / f".part-{'b' * 32}.tmp"
        fresh_legacy.write_bytes(b"PAR1")
        reused = folder / f".part-{_HOST}-{os.getppid()}-{'c' * 32}.tmp"  # a live pid, hours old: reused
        reused.write_bytes(b"PAR1")
        os.utime(reused, (hours_ago, hours_ago))
        appended = store.append(hand_frame(), "second")
        assert not orphan.exists() and not old_legacy.exists() and not reused.exists()
        assert held.is_file() and fresh_legacy.is_file()
        line = appended.cleaned_line()
        assert line is not None and "\n" not in line
        assert line.startswith("removed 3 stale temporary file(s) left by a killed writer")
        why = " ".join(appended.cleaned)
        assert f"process {dead_pid}, is gone" in why and "untouched for 7 h" in why and "a reused pid" in why
        assert appended.summary()["store_temporaries_removed"] == 3
        assert appended.already_stored == 28  # the orphans were never read as data
    finally:
        live.kill()
        live.wait()
    # the live writer has died now: the next append removes its file too
    assert store.append(hand_frame(), "third").cleaned == [
        f"day=2026-11-30/{held.name} (its writer, process {live.pid}, is gone)"
    ]
    assert fresh_legacy.is_file()


def test_nothing_to_clean_is_no_line(tmp_path: Path) -> None:
    store = SampleStore.from_url(str(tmp_path / "store"))
    appended = store.append(hand_frame(), "first")
    assert appended.cleaned == [] and appended.cleaned_line() is None
    # the store's own temporaries carry this host and this process: a writer in this process is alive
    assert not list((tmp_path / "store").rglob(".part-*.tmp"))
