"""The tensor-level peak of a V0 vLLM release's own top-k/top-p pass, measured on the CPU.

Run with the oracle venv's interpreter (it needs torch, not capplan). Argument: one JSON document

    {"source": "/path/to/unpacked/wheel", "num_reqs": S, "vocab": V, "dtype": "bfloat16"}

It prints {"vllm_source", "casts_to_fp32", "peak_bytes", "logits_bytes", "fp32_units", "live_at_peak"}.

What is vLLM's and what is not: the top-k/top-p function (`_apply_top_k_top_p`, `_apply_top_p_top_k` in 0.2.x)
is taken from the release's model_executor/layers/sampler.py as shipped and run as is; whether
`Sampler.forward` casts the logits to fp32 before it is read from the same file (an assignment
`logits = logits.to(torch.float)` in `Sampler.forward`). The steps around it are `Sampler.forward`'s as every
V0 release writes them, replayed here: the temperature division in place, the top-k/top-p call rebinding the
logits, then `torch.softmax` and `torch.log_softmax` in fp32. The profiling run's SamplingParams(top_p=0.99,
top_k=vocab - 1) set p and k for every row. Bytes are counted per storage, as tools/engine_oracle/
vllm_sampler_peak.py counts them (its `LiveBytes`), the model-dtype logits subtracted as there; the CUDA sort's own scratch
is below the dispatcher and not counted (capplan adds it: `engine_constants.torch_sort_scratch_units`).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_sampler_peak import LiveBytes

_TOP_K_TOP_P = ("_apply_top_k_top_p", "_apply_top_p_top_k")


def _release_function(source: Path) -> tuple[Any, bool]:
    """(the release's top-k/top-p function, whether Sampler.forward casts the logits to fp32 first)."""
    path = source / "vllm" / "model_executor" / "layers" / "sampler.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in _TOP_K_TOP_P]
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one of {_TOP_K_TOP_P}, found {[f.name for f in found]}")
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(ast.Module([found[0]], []), str(path), "exec"), namespace)  # the release's own function body
    casts = False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Sampler":
            forward = next(f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
            casts = any(
                isinstance(n, ast.Assign) and ast.unparse(n).replace(" ", "") == "logits=logits.to(torch.float)"
                for n in ast.walk(forward)
            )
    return namespace[found[0].name], casts


def measure(source: str, num_reqs: int, vocab: int, dtype: str) -> dict[str, Any]:
    apply_top_k_top_p, casts = _release_function(Path(source))
    model_dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    p = torch.full((num_reqs,), 0.99, dtype=model_dtype)
    k = torch.full((num_reqs,), vocab - 1, dtype=torch.int)
    temperatures = torch.ones(num_reqs, dtype=torch.float if casts else model_dtype)
    mode = LiveBytes()
    with torch.inference_mode(), mode:
        logits = torch.randn(num_reqs, vocab, dtype=model_dtype)  # the model-dtype logits: subtracted below
        x = logits.to(torch.float) if casts else logits
        x.div_(temperatures.unsqueeze(dim=1))
        x = apply_top_k_top_p(x, p, k)
        probs = torch.softmax(x, dim=-1, dtype=torch.float)
        logprobs = torch.log_softmax(x, dim=-1, dtype=torch.float)
        del x, probs, logprobs
    logits_bytes = logits.numel() * logits.element_size()
    return {
        "vllm_source": source,
        "casts_to_fp32": casts,
        "peak_bytes": mode.peak,
        "logits_bytes": logits_bytes,
        "fp32_units": (mode.peak - logits_bytes) / (num_reqs * vocab * 4),
        "live_at_peak": [[list(shape), dt, n] for shape, dt, n in mode.at_peak],
    }


if __name__ == "__main__":
    document = json.loads(sys.argv[1])
    print(json.dumps(measure(document["source"], int(document["num_reqs"]), int(document["vocab"]),
                             document.get("dtype", "bfloat16"))))  # fmt: skip
