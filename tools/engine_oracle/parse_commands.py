"""Parse engine command lines with the engines' own argument parsers (run in .venv-oracle).

stdin: a JSON list of {"engine": "vllm" | "sglang", "args": [...]} (the arguments after `vllm serve` /
`python -m sglang.launch_server`); stdout: a JSON list, per command, of {"ok": true, "values": {dest:
value}} with every parsed destination, or {"ok": false, "error": "..."} where the parser refused it.
tests/test_deploy_engine_parsers.py sends it the command lines recommendations/deploy writes.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_flags import sglang_parser, vllm_parser

PARSERS = {"vllm": vllm_parser, "sglang": sglang_parser}


def parse(engine: str, args: list[str]) -> dict[str, Any]:
    _release, parser = PARSERS[engine]()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            namespace = parser.parse_args(args)
    except SystemExit:
        return {"ok": False, "error": stderr.getvalue().strip().splitlines()[-1:]}
    return {"ok": True, "values": {key: _plain(value) for key, value in vars(namespace).items()}}


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None)) else repr(value)


def main() -> None:
    commands = json.load(sys.stdin)
    print(json.dumps([parse(c["engine"], c["args"]) for c in commands]))


if __name__ == "__main__":
    main()
