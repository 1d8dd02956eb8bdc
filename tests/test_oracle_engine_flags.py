"""The engines' own parsers as the oracle for capacity/engines/command_flags.py (what `capplan estimate
--from-command` accepts): vLLM 0.33.0's `vllm serve` parser and SGLang 0.5.23's ServerArgs parser, built
in .venv-oracle by tools/engine_flags.py --dump, give exactly the table's flags, destinations, arities,
releases and abbreviation rule. Regenerate the table with `.venv-oracle/bin/python tools/engine_flags.py`.
TensorRT-LLM has no wheel in the oracle venv: its table is read from trtllm-serve's click options."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from capacity.engines.command_flags import ENGINE_FLAGS
from tests.conftest import ORACLE_PYTHON, require_oracle_venv

TOOL = Path(__file__).resolve().parents[1] / "tools" / "engine_flags.py"

pytestmark = pytest.mark.engine_oracle


@pytest.fixture(scope="module")
def parsers() -> dict[str, dict[str, object]]:
    require_oracle_venv()
    done = subprocess.run(
        [str(ORACLE_PYTHON), str(TOOL), "--dump"], capture_output=True, text=True, timeout=600, check=True
    )
    dumped: dict[str, dict[str, object]] = json.loads(done.stdout)
    return dumped


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_table_is_the_engines_parser(parsers: dict[str, dict[str, object]], engine: str) -> None:
    parser, table = parsers[engine], ENGINE_FLAGS[engine]
    assert parser["release"] == table["release"]
    assert parser["abbrev"] == table["abbrev"]
    flags = {option: tuple(entry) for option, entry in parser["flags"].items()}  # type: ignore[attr-defined]
    assert flags == table["flags"]


# vLLM 0.33's EnableDisableAction hides `--no-enable-x` / `--no-disable-x` from help but still parses them
# (vllm/utils/argparse_utils.py); public configs of older releases use them (evaluation/data/memory_holdout.yaml b5-)
_HIDDEN_NEGATIVES = ("--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--no-disable-custom-all-reduce")
_PARSE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from engine_flags import vllm_parser
_, parser = vllm_parser()
out = {}
for flag in sys.argv[2:]:
    ns = parser.parse_args(["--model", "m", flag])
    dest = parser._option_string_actions[flag].dest
    out[flag] = [dest, getattr(ns, dest)]
print(json.dumps(out))
"""


def test_hidden_negative_switches_read_as_the_engine_parses_them() -> None:
    from capacity.engines.command_line import read_command

    require_oracle_venv()
    done = subprocess.run(
        [str(ORACLE_PYTHON), "-c", _PARSE, str(TOOL.parent), *_HIDDEN_NEGATIVES],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    parsed = json.loads(done.stdout.strip().splitlines()[-1])
    for flag in _HIDDEN_NEGATIVES:
        dest, value = parsed[flag]
        command = read_command(f"vllm serve meta-llama/Llama-3.1-8B-Instruct {flag}")
        assert command.options.get(dest, "unread") in (value, "unread"), flag
    assert read_command("vllm serve m --no-enable-prefix-caching").options["enable_prefix_caching"] is False
