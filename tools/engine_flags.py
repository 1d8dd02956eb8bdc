"""Regenerate capacity/engines/command_flags.py: every flag the engines' own command-line parsers accept.

    .venv-oracle/bin/python tools/engine_flags.py                 # rewrite the table (vLLM, SGLang)
    .venv-oracle/bin/python tools/engine_flags.py --dump          # print the parsers' flags as JSON
    .venv-oracle/bin/python tools/engine_flags.py --trtllm-serve tensorrt_llm/commands/serve.py
    VENV/bin/python tools/engine_flags.py --later                 # a newer vLLM: its added flags, kept beside

vLLM: `vllm serve`'s parser, `vllm.entrypoints.common.cli_args.make_arg_parser(FlexibleArgumentParser())`
(AsyncEngineArgs.add_cli_args plus the frontend's flags); SGLang: `ServerArgs.add_cli_args(ArgumentParser())`
(`python -m sglang.launch_server`, `sglang serve`). Both run in .venv-oracle (tools/engine_oracle/setup_venv.sh).
TensorRT-LLM is not installed there (no CPU wheel): its `trtllm-serve` flags are read from the click
decorators of `serve()` in tensorrt_llm/commands/serve.py when a path is given, else kept as they are.

Each engine: whether the parser takes unique prefixes (argparse allow_abbrev); each flag: the option string -> (destination, arity), arity "0" (a switch), "1", "?", "+" or "*".
`--later` runs with a newer vLLM than the table's (a venv of its own: `pip install --no-deps` the wheel over the
oracle venv's packages) and records only the flags it adds, under the table's `later` (release -> flags), so a
command of that release parses while the table stays the oracle venv's parser.
Runs without capplan on the path (the oracle venv has no capplan).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

TABLE = Path(__file__).resolve().parents[1] / "capacity" / "engines" / "command_flags.py"


def _arity(action: argparse.Action) -> str:
    nargs = action.nargs
    if nargs is None:
        return "1"
    if nargs == 0:
        return "0"
    return str(nargs)


def _flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, str]]:
    """Every option string the parser accepts: its registry, not the actions' visible strings (vLLM hides
    `--no-enable-x` / `--no-disable-x` from help, EnableDisableAction, but still parses them)."""
    out: dict[str, tuple[str, str]] = {}
    for option, action in parser._option_string_actions.items():
        out[option] = (action.dest, _arity(action))
    return dict(sorted(out.items()))


def vllm_parser() -> tuple[str, argparse.ArgumentParser]:
    """vLLM's release and its `vllm serve` argument parser."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    import vllm
    from vllm.platforms import current_platform

    if not current_platform.device_type:  # a CPU-only machine: DeviceConfig's default needs a device type
        current_platform.device_type = "cuda"
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return vllm.__version__, make_arg_parser(FlexibleArgumentParser())


def sglang_parser() -> tuple[str, argparse.ArgumentParser]:
    """SGLang's release and its server's argument parser (`sglang.launch_server`)."""
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return sglang.__version__, parser


def vllm_flags() -> tuple[str, dict[str, tuple[str, str]], bool]:
    release, parser = vllm_parser()
    return release, _flags(parser), parser.allow_abbrev


def sglang_flags() -> tuple[str, dict[str, tuple[str, str]], bool]:
    release, parser = sglang_parser()
    return release, _flags(parser), parser.allow_abbrev


def trtllm_flags(serve_py: Path) -> dict[str, tuple[str, str]]:
    """The options of `serve()` (the `trtllm-serve` command) from its click decorators."""
    tree = ast.parse(serve_py.read_text())
    serve = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "serve")
    out: dict[str, tuple[str, str]] = {"--help": ("help", "0")}
    for deco in serve.decorator_list:
        if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "option"):
            continue
        names = [a.value for a in deco.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        options = [n for n in names if n.startswith("-")]
        dest = next((n for n in names if not n.startswith("-")), options[0].lstrip("-").replace("-", "_"))
        keywords = {k.arg: k.value for k in deco.keywords}
        flag = isinstance(keywords.get("is_flag"), ast.Constant) and keywords["is_flag"].value is True  # type: ignore[attr-defined]
        for option in options:
            out[option] = (dest, "0" if flag else "1")
    return dict(sorted(out.items()))


def _render(tables: dict[str, dict[str, Any]]) -> str:
    lines = [
        '"""Every flag the engines\' serve commands accept (GENERATED by tools/engine_flags.py; do not edit).',
        "",
        "ENGINE_FLAGS[engine]: release, how the table was made, whether the parser takes a unique prefix of a",
        "long option (argparse's allow_abbrev: `--tp` for SGLang's `--tp-size`), and flags: option string ->",
        '(destination, arity), arity "0" (a switch), "1", "?", "+" or "*". tests/test_oracle_engine_flags.py',
        'checks it against the engines\' parsers in .venv-oracle."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        "# fmt: off",
        "ENGINE_FLAGS: dict[str, dict[str, Any]] = {",
    ]
    for engine, table in tables.items():
        lines.append(f"    {engine!r}: {{")
        lines.append(f"        'release': {table['release']!r},")
        lines.append(f"        'source': {table['source']!r},")
        lines.append(f"        'abbrev': {table['abbrev']!r},")
        lines.append("        'flags': {")
        line = "           "
        for option, (dest, arity) in table["flags"].items():
            entry = f" {option!r}: ({dest!r}, {arity!r}),"
            if len(line) + len(entry) > 116:
                lines.append(line)
                line = "           "
            line += entry
        lines.append(line)
        lines.append("        },")
        if table.get("later"):
            lines.append("        'later': {")
            for release, flags in table["later"].items():
                lines.append(f"            {release!r}: {{")
                lines += [f"                {option!r}: ({dest!r}, {arity!r})," for option, (dest, arity) in flags.items()]
                lines.append("            },")
            lines.append("        },")
        lines.append("    },")
    lines += ["}", "# fmt: on", ""]
    return "\n".join(lines)


def _release_key(release: str) -> tuple[int, ...]:
    """'0.34.0' -> (0, 34, 0): releases compared as numbers."""
    return tuple(int(part) for part in re.findall(r"\d+", release)[:3])


def _current() -> dict[str, dict[str, Any]]:
    if not TABLE.exists():
        return {}
    namespace: dict[str, Any] = {}
    exec(compile(TABLE.read_text(), str(TABLE), "exec"), namespace)
    return namespace["ENGINE_FLAGS"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", action="store_true", help="print the installed engines' flags as JSON")
    ap.add_argument("--trtllm-serve", type=Path, help="tensorrt_llm/commands/serve.py to read trtllm-serve from")
    ap.add_argument("--trtllm-release", default=None, help="the TensorRT-LLM release that serve.py is from")
    ap.add_argument("--later", action="store_true", help="record a newer vLLM's added flags beside the table")
    args = ap.parse_args()
    v_release, v_flags, v_abbrev = vllm_flags()
    if args.later:
        tables = _current()
        known = tables["vllm"]["flags"]
        added = {option: entry for option, entry in v_flags.items() if option not in known}
        tables["vllm"].setdefault("later", {})[v_release] = added
        TABLE.write_text(_render(tables))
        print(f"wrote {len(added)} flags of vLLM {v_release} to {TABLE}", file=sys.stderr)
        return
    s_release, s_flags, s_abbrev = sglang_flags()
    if args.dump:
        json.dump({"vllm": {"release": v_release, "abbrev": v_abbrev, "flags": v_flags},
                   "sglang": {"release": s_release, "abbrev": s_abbrev, "flags": s_flags}}, sys.stdout)
        return
    tables = _current()
    tables.get("trtllm", {}).setdefault("abbrev", False)
    newer = _release_key(v_release)
    later = {r: f for r, f in tables.get("vllm", {}).get("later", {}).items() if _release_key(r) > newer}  # kept
    tables["vllm"] = {
        "later": later,
        "release": v_release,
        "source": "vllm.entrypoints.common.cli_args.make_arg_parser(FlexibleArgumentParser()) (vllm serve)",
        "abbrev": v_abbrev,
        "flags": v_flags,
    }
    tables["sglang"] = {
        "release": s_release,
        "source": "sglang.srt.server_args.ServerArgs.add_cli_args(ArgumentParser()) (sglang.launch_server, sglang serve)",
        "abbrev": s_abbrev,
        "flags": s_flags,
    }
    if args.trtllm_serve is not None:
        tables["trtllm"] = {
            "release": args.trtllm_release or "unknown",
            "source": "click options of serve() in tensorrt_llm/commands/serve.py (trtllm-serve)",
            "abbrev": False,  # click matches option names exactly
            "flags": trtllm_flags(args.trtllm_serve),
        }
    TABLE.write_text(_render({k: tables[k] for k in ("vllm", "sglang", "trtllm") if k in tables}))
    print(f"wrote {TABLE}", file=sys.stderr)


if __name__ == "__main__":
    main()
