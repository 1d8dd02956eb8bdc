"""The peer half of `benchmarks/aiconfigurator_peer.py`: NVIDIA AIConfigurator 0.12 asked for each mapped row.

Runs inside `.venv-aiconfigurator` (tools/aiconfigurator/setup_venv.sh) and imports nothing from capplan:
the payload (a JSON file written by `benchmarks/aiconfigurator_peer.py`) carries one request per
measured row, already in AIConfigurator's names (a local config folder, its system, backend, mode,
batch, lengths, parallelism and quantization modes). One process answers them all, one after the other,
through `aiconfigurator.cli.api.cli_estimate`, the function behind `aiconfigurator cli estimate`.

Offline: the Hugging Face hub is switched off (HF_HUB_OFFLINE) and every name lookup and TCP/UDP
connect in this process raises, so a row whose config it would fetch is refused with that reason instead of a download.
Each answer is timed (wall and CPU seconds, one call each). A row it rejects (unsupported architecture,
out of memory, no data for the system) is kept with the error's first line as the reason.

    .venv-aiconfigurator/bin/python -I benchmarks/aiconfigurator_runner.py PAYLOAD.json OUT.json
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from importlib.metadata import version
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")

_connect = socket.socket.connect


def _offline_connect(self: socket.socket, address: Any) -> None:
    """Local (AF_UNIX) sockets only: the peer must answer from its own installed data."""
    if self.family in (socket.AF_INET, socket.AF_INET6):
        raise OSError(f"network disabled by the peer runner (connect to {address!r})")
    _connect(self, address)


def _offline_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    """No name lookups either (a DNS query leaves the machine before any connect)."""
    raise OSError(f"network disabled by the peer runner (lookup of {host!r})")


socket.socket.connect = _offline_connect  # type: ignore[method-assign,assignment]
socket.getaddrinfo = _offline_getaddrinfo

# keyword arguments of cli_estimate the payload may set (anything else in a request is an error)
_ARGUMENTS = (
    "model_path",
    "system_name",
    "mode",
    "backend_name",
    "isl",
    "osl",
    "batch_size",
    "tp_size",
    "pp_size",
    "moe_tp_size",
    "moe_ep_size",
    "gemm_quant_mode",
    "moe_quant_mode",
    "kvcache_quant_mode",
)


def _reason(exc: BaseException, model_path: str) -> str:
    """The error's kind and first sentence, the config folder named by its last two parts and this venv's
    path cut: rows refused for the same cause count together."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text.replace(model_path, "/".join(model_path.split("/")[-2:])).replace(sys.prefix, "<venv>")
    return f"{type(exc).__name__}: {text.split('. ', 1)[0][:200]}"


def answer(request: dict[str, Any], estimate: Any) -> dict[str, Any]:
    """One request through `cli_estimate`: TTFT, TPOT, output tokens/s and the data version, or the reason."""
    kwargs = {k: request[k] for k in _ARGUMENTS if request.get(k) is not None}
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        result = estimate(**kwargs)
        out: dict[str, Any] = {
            "ttft_ms": float(result.ttft),
            "tpot_ms": float(result.tpot),
            "output_tokens_per_s": float(result.raw["tokens/s"]),
            "backend_version": str(result.backend_version),
            "kv_cache_warning": result.kv_cache_warning,
            "quant": {k: str(result.raw.get(k)) for k in ("gemm", "kvcache", "moe")},
        }
    except Exception as exc:  # every refusal is a result, counted by its reason
        out = {"refused": _reason(exc, request["model_path"])}
    out.update(id=request["id"], wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    with open(args[0]) as f:
        payload = json.load(f)
    start = time.perf_counter()
    from aiconfigurator.cli.api import cli_estimate

    import_s = time.perf_counter() - start
    answers = [answer(request, cli_estimate) for request in payload["requests"]]
    report = {
        "aiconfigurator": version("aiconfigurator"),
        "aiconfigurator_core": version("aiconfigurator-core"),
        "python": sys.version.split()[0],
        "import_s": import_s,
        "answers": answers,
    }
    with open(args[1], "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
