"""The grid built by two processes (`warehouse.grid_processes`): a second interpreter builds the last part of
the fleet from this process's registry, and its chunks join this process's. The oracle is the grid built by
one process (`iter_grid_tables`), which `tests/test_grid.py` holds to the scalar `estimate` and
`tests/test_grid_view.py` to the view: the same layouts, deployments, context rows and limits, in the same order
under the same ids; only the pool shapes' ids may differ, and they name the same shapes."""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import pickle
import sys
import tempfile
import threading
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from capacity.grid import TARGET_CONCURRENCIES, GridBuild, GridTables, iter_grid_tables
from tests.test_grid import _strings, gpus, models
from warehouse.grid_processes import (
    BUILD_NICENESS,
    GridProcessError,
    _Arrivals,
    _build_part,
    _Dealer,
    _lower_priority,
    _ranges,
    _read,
    iter_grid_tables_parallel,
)


def _joined(chunks: list[GridTables]) -> GridTables:
    limits = [c.context_limits for c in chunks if c.context_limits is not None]
    return GridTables(
        gpus=chunks[0].gpus,
        layouts=pl.concat([c.layouts for c in chunks]),
        deployments=pl.concat([c.deployments for c in chunks]),
        contexts=pl.concat([c.contexts for c in chunks]),
        context_limits=pl.concat(limits) if limits else None,
        context_view=chunks[0].context_view,
        pool_shapes=chunks[-1].pool_shapes,
        settings=chunks[-1].settings,
    )


def _shapes_by_content(tables: GridTables) -> pl.DataFrame:
    """The deployments with each pool shape id replaced by the shape's columns."""
    assert tables.pool_shapes is not None
    return tables.deployments.join(tables.pool_shapes, on="shape_id", how="left", maintain_order="left").drop(
        "shape_id"
    )


def test_two_processes_build_the_context_view_of_one() -> None:
    one = list(iter_grid_tables(models(), gpus(), chunk_models=3, context_view=True))
    two = list(iter_grid_tables_parallel(models(), gpus(), chunk_models=3, context_view=True, processes=2))
    assert len(two) >= 4  # both processes cut their part into chunks
    single, double = _joined(one), _joined(two)
    assert_frame_equal(_strings(double.layouts), _strings(single.layouts))
    # the second process met the shapes in another order: the same shapes, other ids
    assert_frame_equal(_shapes_by_content(double), _shapes_by_content(single))
    assert double.settings is not None and single.settings is not None and double.settings.equals(single.settings)
    # the context rows the view computes from them
    assert_frame_equal(double.context_rows(), single.context_rows())
    # every chunk carries the shapes its deployments name
    for chunk in two:
        assert chunk.pool_shapes is not None
        assert chunk.deployments["shape_id"].is_in(chunk.pool_shapes["shape_id"].implode()).all()


def test_two_processes_build_the_stored_contexts_and_limits_of_one() -> None:
    one = _joined(list(iter_grid_tables(models(), gpus(), concurrencies=TARGET_CONCURRENCIES, chunk_models=4)))
    parts = list(
        iter_grid_tables_parallel(
            models(), gpus(), concurrencies=TARGET_CONCURRENCIES, chunk_models=4, processes=2
        )
    )
    two = _joined(parts)
    for name in ("layouts", "deployments", "contexts", "context_limits"):
        assert_frame_equal(_strings(getattr(two, name)), _strings(getattr(one, name)))


def test_one_process_or_one_chunk_builds_here() -> None:
    """processes=1, and a fleet of one chunk, are `iter_grid_tables` itself (no second interpreter)."""
    for kwargs in ({"processes": 1, "chunk_models": 3}, {"processes": 2, "chunk_models": 100}):
        chunks = list(iter_grid_tables_parallel(models(), gpus(), context_view=True, **kwargs))  # type: ignore[arg-type]
        expected = list(iter_grid_tables(models(), gpus(), context_view=True, chunk_models=kwargs["chunk_models"]))
        assert [c.deployments.height for c in chunks] == [c.deployments.height for c in expected]


def test_a_registry_taken_from_another_build_builds_the_same_tables() -> None:
    here = GridBuild(models(), gpus(), context_view=True)
    taken = GridBuild(models(), gpus(), context_view=True, registry=pickle.loads(pickle.dumps(here.registry())))
    for mine, theirs in zip(here.chunks(chunk_models=4), taken.chunks(chunk_models=4), strict=True):
        assert_frame_equal(mine.deployments, theirs.deployments)
        assert_frame_equal(_strings(mine.layouts), _strings(theirs.layouts))


def test_a_build_of_part_of_the_fleet_counts_models_as_the_fleet_does() -> None:
    """The second process is sent only its models and the fleet's registry (`first_model`)."""
    whole = GridBuild(models(), gpus())
    part = GridBuild(models()[5:], gpus(), registry=whole.registry(), first_model=5)
    for mine, theirs in zip(whole.chunks(5, chunk_models=3), part.chunks(5, chunk_models=3), strict=True):
        assert_frame_equal(_strings(mine.layouts), _strings(theirs.layouts))
        assert_frame_equal(mine.contexts, theirs.contexts)
    with pytest.raises(ValueError, match="registry"):
        GridBuild(models()[5:], gpus(), first_model=5)


def test_a_second_process_that_fails_says_why_in_one_line(tmp_path: Path) -> None:
    """The child's error comes back as one line (no traceback), and the parent raises it."""
    receiver, sender = multiprocessing.Pipe(duplex=False)
    request = (gpus(), None, None, True, str(tmp_path))
    _build_part(sender, io.BytesIO(pickle.dumps(request) + b"not a pickle"))  # a registry it cannot read
    kind, _, reason, _ = receiver.recv()
    assert kind == "error" and "\n" not in reason and reason


def test_a_second_process_that_dies_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(GridProcessError, match="stopped without a word"):
        list(iter_grid_tables_parallel(models(), gpus(), chunk_models=3, context_view=True, processes=2))


def test_a_message_this_process_cannot_read_is_an_error_not_a_wait(tmp_path: Path) -> None:
    """The reader thread turns a message it cannot unpickle into the consumer's error (before, the thread died
    and the consumer waited for the chunk forever)."""
    receiver, sender = multiprocessing.Pipe(duplex=False)
    sender.send_bytes(b"not a pickle")
    arrived = _Arrivals()
    _read(receiver, arrived, tmp_path, lambda: None)
    with pytest.raises(GridProcessError, match="cannot read"):
        arrived.take(0)


def test_a_consumer_that_stops_early_stops_the_second_process() -> None:
    """Closing the generator after its first chunk kills the child and joins the threads (no hang, no orphan)."""
    before = {t.name for t in threading.enumerate()}
    chunks = iter_grid_tables_parallel(models(), gpus(), chunk_models=3, context_view=True, processes=2)
    assert next(chunks).deployments.height > 0
    chunks.close()
    left = {t.name for t in threading.enumerate()} - before
    assert not any(name.startswith("capplan-grid") for name in left)


@pytest.mark.parametrize("count, chunk_models", [(546, 192), (546, 92), (40, 6), (40, 100), (5, 1), (3, 1), (1, 1)])
def test_the_fleet_is_cut_with_small_chunks_first_and_last(count: int, chunk_models: int) -> None:
    """Every model once, in order; an even count of chunks, a pair more than `chunk_models` asks for, the first two
    and the last two about half the others; one chunk where `chunk_models` holds the fleet."""
    fleet = list(range(count))
    ranges = _ranges(fleet, chunk_models)  # type: ignore[arg-type]
    assert [m for _, part in ranges for m in part] == fleet
    assert all(begin == part[0] for begin, part in ranges)
    asked = math.ceil(count / chunk_models)
    if asked == 1:
        assert len(ranges) == 1
        return
    sizes = [len(part) for _, part in ranges]
    if count >= 4 * len(sizes):  # chunks of a few models each: the shape holds to a model
        assert len(sizes) == 2 * (math.ceil(asked / 2) + 1)
        middle = sizes[2:-2] or [2 * sizes[0]]
        for end in (*sizes[:2], *sizes[-2:]):
            assert abs(end - min(middle) / 2) <= 1


def test_chunks_are_dealt_once_each_in_order_to_whoever_asks() -> None:
    """Two threads asking at once are dealt every chunk exactly once, each in id order; chunk 1 goes to the second
    process's first ask; a closed dealer deals none."""
    ranges = [(begin, [begin]) for begin in range(200)]
    dealer = _Dealer(ranges)  # type: ignore[arg-type]
    taken: list[list[int]] = [[], []]

    def ask(mine: list[int], second: bool) -> None:
        while (dealt := dealer.deal(second)) is not None:
            mine.append(dealt[0])

    threads = [threading.Thread(target=ask, args=(mine, second)) for mine, second in zip(taken, (False, True), strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken[0] + taken[1]) == list(range(200))
    assert all(mine == sorted(mine) for mine in taken)
    assert taken[1][0] == 1 and 1 not in taken[0]
    closed = _Dealer(ranges)  # type: ignore[arg-type]
    closed.close()
    assert closed.deal() is None and closed.deal(second=True) is None and list(closed.mine()) == []


def test_this_process_leaves_chunk_1_to_the_second() -> None:
    dealer = _Dealer([(0, [0]), (1, [1]), (2, [2])])  # type: ignore[list-item]
    assert [begin for begin, _ in dealer.mine()] == [0, 2]
    dealt = dealer.deal(second=True)
    assert dealt is not None and dealt[0] == 1


def test_the_second_process_builds_chunks_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunks that reach the caller come from both processes (the second's carry its pool shapes)."""
    from warehouse import grid_processes

    seen: list[bool] = []
    take = grid_processes._Arrivals.take

    def counted(self: grid_processes._Arrivals, index: int) -> tuple[GridTables, object]:
        chunk, shapes = take(self, index)
        seen.append(shapes is not None)
        return chunk, shapes

    monkeypatch.setattr(grid_processes._Arrivals, "take", counted)
    list(iter_grid_tables_parallel(models(), gpus(), chunk_models=3, context_view=True, processes=2))
    assert any(seen) and not all(seen)


def test_the_second_process_leaves_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its chunks' tables cross as files in a folder of the first process's, each removed once read, and the folder
    once the build is done."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    chunks = list(iter_grid_tables_parallel(models(), gpus(), chunk_models=3, context_view=True, processes=2))
    assert len(chunks) >= 4
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own priority is Linux's")
def test_a_build_thread_runs_at_a_lower_priority_than_the_caller() -> None:
    """The build's threads give the cores to the caller's inserts first; the caller's own priority is untouched."""
    seen: list[int] = []

    def lowered() -> None:
        _lower_priority(threading.get_native_id())
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=lowered)
    thread.start()
    thread.join()
    assert seen == [min(19, before + BUILD_NICENESS)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
