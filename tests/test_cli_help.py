"""Help for every command of the tree, read in an 80-column terminal (issue 24): nothing cut (no line
past 80 columns, no "..." where a group lists its commands: click used to cut each command's
sentence to one line), no two options with the same help, and the default the help states for
--gpu-memory-utilization is the one an estimate without the flag assumes. The oracle: the help text
click prints against each command's own docstring and options, and the estimate's JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pipelines.cli import app

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _tree(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _tree(sub, (*path, name))


TREE = list(_tree(typer.main.get_command(app)))


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", [p for p, _c in TREE], ids=lambda p: " ".join(p) or "capplan")
def test_help_is_whole_in_80_columns(path: tuple[str, ...]) -> None:
    command = dict(TREE)[path]
    text = _help(path)
    assert all(len(line) <= 80 for line in text.splitlines()), [line for line in text.splitlines() if len(line) > 80]
    flat = "".join(text.split())  # wrapping may break at a hyphen: compare without whitespace
    for name, sub in getattr(command, "commands", {}).items():  # click cut these to one line, ending "..."
        first_sentence = re.split(r"(?<=\.)\s", " ".join((sub.help or "").split()))[0]
        assert "".join(first_sentence.split()) in flat, (name, first_sentence)
    for param in command.params:
        for name in getattr(param, "opts", []):
            assert name in flat, name
        if getattr(param, "help", None):
            assert "".join(param.help.split()) in flat, param.name


@pytest.mark.parametrize("path", [p for p, c in TREE if c.params], ids=lambda p: " ".join(p) or "capplan")
def test_no_two_options_of_a_command_share_a_help_text(path: tuple[str, ...]) -> None:
    helps = [" ".join(p.help.lower().split()) for p in dict(TREE)[path].params if getattr(p, "help", None)]
    assert len(helps) == len(set(helps)), [h for h in helps if helps.count(h) > 1]


def test_the_stated_memory_default_is_what_an_estimate_assumes() -> None:
    flat = " ".join(_help(("estimate",)).split())
    stated = re.search(r"vLLM (0\.\d+) from 0\.22 \(0\.9 before\)", flat)
    trtllm = re.search(r"TensorRT-LLM (0\.\d+) of the free memory", flat)
    assert stated and trtllm, flat

    def assumed(*engine: str) -> float:
        args = ["estimate", LLAMA, "--gpu", "H100", "--max-model-len", "8192", "--json", *engine]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return float(json.loads(result.stdout)["gpu_memory_utilization"])

    assert assumed() == float(stated.group(1))
    assert assumed("--engine-version", "0.21") == 0.9
    assert assumed("--engine", "trtllm") == float(trtllm.group(1))
