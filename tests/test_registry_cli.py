"""`capplan registry ...` through typer's CliRunner: summaries, exit codes, one-line errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from models_registry import db
from pipelines.cli import app

FIXTURES = Path(__file__).parent / "fixtures" / "broken_configs"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def empty_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """CAPPLAN_REGISTRY_URL pointing at a file that does not exist yet."""
    path = tmp_path / "var" / "registry.db"
    monkeypatch.setenv(db.URL_ENV, f"sqlite:///{path}")
    return path


def _counts(output: str, kind: str) -> dict[str, int]:
    match = re.search(rf"^{kind}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$", output, re.MULTILINE)
    assert match, output
    return dict(zip(("seen", "added", "updated", "unchanged", "failed"), map(int, match.groups()), strict=True))


def _one_line_error(result: Any) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    return str(lines[0])


def test_ingest_catalog_twice_then_list_and_show(runner: CliRunner, empty_registry: Path) -> None:
    first = runner.invoke(app, ["registry", "ingest"])
    assert first.exit_code == 0, first.output
    models, gpus = _counts(first.stdout, "models"), _counts(first.stdout, "gpus")
    assert models["seen"] == models["added"] + models["failed"] > 0
    assert gpus["added"] == gpus["seen"] > 0 and gpus["failed"] == 0
    assert empty_registry.is_file()

    second = runner.invoke(app, ["registry", "ingest", "--catalog"])
    assert second.exit_code == 0, second.output
    assert _counts(second.stdout, "models")["added"] == _counts(second.stdout, "models")["updated"] == 0
    assert _counts(second.stdout, "gpus")["added"] == _counts(second.stdout, "gpus")["updated"] == 0

    listed = runner.invoke(app, ["registry", "list"])
    assert listed.exit_code == 0, listed.output
    assert "meta-llama/Llama-2-7b-hf" in listed.stdout
    gpu_list = runner.invoke(app, ["registry", "list", "--gpus"])
    assert gpu_list.exit_code == 0 and "h100-sxm-80gb" in gpu_list.stdout

    shown = runner.invoke(app, ["registry", "show", "Llama-2-7b-hf"])
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "meta-llama/Llama-2-7b-hf" in out
    assert "full x32" in out
    assert re.search(r"KV bytes per token +524,288 at float16", out)  # 32 layers * 2 * 32 heads * 128 * 2 B
    assert re.search(r"checkpoint +12\.55 GiB \(13,476,839,424 B\)", out)
    assert "1 revision(s)" in out


def test_strict_exits_1_when_anything_failed(runner: CliRunner, empty_registry: Path) -> None:
    lenient = runner.invoke(app, ["registry", "ingest", "--dir", str(FIXTURES)])
    assert lenient.exit_code == 0, lenient.output
    assert _counts(lenient.stdout, "models")["failed"] > 30
    assert re.search(r"^  model negative-layers \[config\]: .*num_hidden_layers", lenient.stdout, re.MULTILINE)
    strict = runner.invoke(app, ["registry", "ingest", "--dir", str(FIXTURES), "--strict"])
    assert strict.exit_code == 1
    assert _counts(strict.stdout, "models")["added"] == 0
    assert "Traceback" not in strict.output


def test_strict_exits_0_when_nothing_failed(runner: CliRunner, empty_registry: Path, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(FIXTURES / "valid-llama", configs / "acme" / "tiny")
    result = runner.invoke(app, ["registry", "ingest", "--dir", str(configs), "--strict"])
    assert result.exit_code == 0, result.output
    assert _counts(result.stdout, "models") == {"seen": 1, "added": 1, "updated": 0, "unchanged": 0, "failed": 0}


def test_show_history_after_a_config_change(runner: CliRunner, empty_registry: Path, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    shutil.copytree(FIXTURES / "valid-llama", configs / "acme" / "tiny")
    assert runner.invoke(app, ["registry", "ingest", "--dir", str(configs)]).exit_code == 0
    path = configs / "acme" / "tiny" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "max_position_embeddings": 4096}))
    result = runner.invoke(app, ["registry", "ingest", "--dir", str(configs)])
    assert _counts(result.stdout, "models")["updated"] == 1
    shown = runner.invoke(app, ["registry", "show", "acme/tiny"])
    assert "2 revision(s)" in shown.stdout
    assert len(re.findall(r"^    \* ", shown.stdout, re.MULTILINE)) == 1  # one current revision


def test_ingest_hub_offline(runner: CliRunner, empty_registry: Path, hub_cache: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = json.loads((FIXTURES / "valid-qwen2" / "config.json").read_text())
    commit = hub_cache.add("acme/qwen-tiny", {"config.json": config})
    result = runner.invoke(
        app,
        ["registry", "ingest", "--hub", "acme/qwen-tiny", "--hub", "acme/absent", "--cache-dir", str(hub_cache.path)],
    )
    assert result.exit_code == 1, result.output  # a repo asked for by name was not ingested
    assert _counts(result.stdout, "models") == {"seen": 2, "added": 1, "updated": 0, "unchanged": 0, "failed": 1}
    assert "acme/absent" in result.stdout and "HF_HUB_OFFLINE" in result.stdout
    assert result.stderr.startswith("error: 1 of 2 requested repo(s) not ingested: acme/absent")
    shown = runner.invoke(app, ["registry", "show", "acme/qwen-tiny"])
    assert commit in shown.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["registry", "ingest", "--dir", "/no/such/dir"], "not a directory"),
        (["registry", "ingest", "--dir", ".", "--hub", "a/b"], "choose one of"),
        (["registry", "ingest", "--catalog", "--hub", "a/b"], "choose one of"),
        (["registry", "show", "no-such/model-anywhere"], "unknown model"),
        (["registry", "show", "/no/such/config.json"], "no such file"),
        (["registry", "list"], "run `capplan registry ingest` first"),
    ],
)
def test_user_errors_are_one_line_exit_2(runner: CliRunner, empty_registry: Path, args: list[str], words: str) -> None:
    assert words in _one_line_error(runner.invoke(app, args))


def test_broken_config_path_is_one_line_exit_2(runner: CliRunner, empty_registry: Path) -> None:
    line = _one_line_error(runner.invoke(app, ["registry", "show", str(FIXTURES / "zero-heads")]))
    assert "num_attention_heads must be positive" in line


def test_bad_registry_url_is_one_line_exit_2(runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(db.URL_ENV, "nosuchdriver://nowhere/db")
    assert "registry" in _one_line_error(runner.invoke(app, ["registry", "ingest"]))


def test_without_a_registry_show_and_gpu_list_use_the_catalog(runner: CliRunner, empty_registry: Path) -> None:
    shown = runner.invoke(app, ["registry", "show", "meta-llama/Llama-2-7b-hf"])
    assert shown.exit_code == 0, shown.output
    assert "not in the registry" in shown.stdout
    gpus = runner.invoke(app, ["registry", "list", "--gpus"])
    assert gpus.exit_code == 0 and "h100-sxm-80gb" in gpus.stdout
    assert not empty_registry.exists()
