"""The habits of the CLIs users know: `--version`, `-h`, help on every option, and vLLM's own flag
names on `capplan estimate`, so the flags of a `vllm serve` command paste as they are."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pipelines.cli import app

LLAMA = Path(__file__).parent / "fixtures" / "broken_configs" / "valid-llama" / "config.json"


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


ALL_COMMANDS = list(_commands(typer.main.get_command(app)))


def test_version(runner: CliRunner) -> None:
    for flag in ("--version", "-V"):
        result = runner.invoke(app, [flag])
        assert result.exit_code == 0 and result.output == f"capplan {version('capplan')}\n"


@pytest.mark.parametrize("path", [p for p, _ in ALL_COMMANDS], ids=lambda p: " ".join(p) or "capplan")
def test_dash_h_is_help_everywhere(runner: CliRunner, path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "-h"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_every_option_and_argument_says_what_it_is() -> None:
    missing = [
        f"{' '.join(path) or 'capplan'} {param.name}"
        for path, command in ALL_COMMANDS
        for param in command.params
        if not (getattr(param, "help", None) or "").strip()
    ]
    assert missing == []


def _estimate(runner: CliRunner, *flags: str) -> dict[str, Any]:
    result = runner.invoke(app, ["estimate", str(LLAMA), "--gpu", "H100", "--json", *flags])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_vllm_serve_flags_are_aliases(runner: CliRunner) -> None:
    ours = _estimate(
        runner,
        *("--tp", "2", "--pp", "1", "--dtype", "bf16", "--kv-dtype", "fp8", "--max-model-len", "4096"),
        *("--gpu-memory-utilization", "0.85", "--block-size", "32", "--max-num-seqs", "64"),
        *("--max-num-batched-tokens", "4096"),
    )
    pasted = _estimate(  # as in `vllm serve MODEL -tp 2 --pipeline-parallel-size 1 --dtype bfloat16 ...`
        runner,
        *("-tp", "2", "--pipeline-parallel-size", "1", "--dtype", "bfloat16", "--kv-cache-dtype", "fp8"),
        *("--max-model-len", "4096", "--gpu-memory-utilization", "0.85", "--block-size", "32"),
        *("--max-num-seqs", "64", "--max-num-batched-tokens", "4096"),
    )
    assert pasted == ours
    assert (ours["tp"], ours["kv_dtype"], ours["block_size"]) == (2, "fp8", 32)
    half = _estimate(runner, "--tensor-parallel-size", "2", "--dtype", "half")
    assert half == _estimate(runner, "--tp", "2", "--dtype", "fp16")


def test_kv_cache_memory_bytes_is_vllms_spelling_of_the_budget(runner: CliRunner) -> None:
    by_gib = _estimate(runner, "--kv-cache-memory-gib", "20")
    by_bytes = _estimate(runner, "--kv-cache-memory-bytes", str(20 * 2**30))
    assert by_bytes == by_gib and by_gib["kv_budget_bytes_per_gpu"] == 20 * 2**30
    both = runner.invoke(
        app,
        ["estimate", str(LLAMA), "--gpu", "H100", "--kv-cache-memory-gib", "1", "--kv-cache-memory-bytes", "1"],
    )
    assert both.exit_code == 2 and both.stderr.count("\n") == 1 and "not both" in both.stderr


def test_a_command_is_built_alone_and_imports_no_other_command() -> None:
    """`capplan estimate ...` builds only `estimate` (`build_app(only=...)`): no other command's module, and not the
    warehouse or Dagster, is imported; the same command built alone has the same options and help as in the app."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "sys.argv = ['capplan', 'estimate', 'meta-llama/Llama-3.1-8B-Instruct', '--gpu', 'l40s-48gb', '--json']\n"
        "from pipelines import cli\n"
        "try:\n    cli.main()\nexcept SystemExit as done:\n    assert done.code in (0, None), done.code\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('pipelines.commands.') or m in ('dagster', 'warehouse'))\n"
        "print(loaded, file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["b_max"] > 0
    loaded = run.stderr.strip().splitlines()[-1]
    assert "pipelines.commands.estimate" in loaded
    for other in ("pipelines.commands.limits", "pipelines.commands.nightly", "pipelines.commands.report", "'dagster'"):
        assert other not in loaded, loaded
    from pipelines.cli import build_app

    alone = typer.main.get_command(build_app("estimate"))
    whole = typer.main.get_command(app)
    assert list(alone.commands) == ["estimate"]  # type: ignore[attr-defined]
    ctx = typer.Context(whole)
    alone_params = [p.opts for p in alone.commands["estimate"].get_params(ctx)]  # type: ignore[attr-defined]
    whole_params = [p.opts for p in whole.commands["estimate"].get_params(ctx)]  # type: ignore[attr-defined]
    assert alone_params == whole_params
