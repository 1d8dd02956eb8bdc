"""Rank 0 of a TP group of N, for vLLM's layers built in one CPU process (the oracle runners' shared helper)."""

from __future__ import annotations

import sys


def patch_tp(tp: int) -> None:
    """Every loaded vLLM module's TP size / rank functions answer `tp` / 0, so each layer built after this shards as
    rank 0 of a group of `tp` does (the modules imported the functions by name: each one's binding is replaced)."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("vllm") or module is None:
            continue
        if hasattr(module, "get_tensor_model_parallel_world_size"):
            module.get_tensor_model_parallel_world_size = lambda *a, **k: tp  # type: ignore[attr-defined]
        if hasattr(module, "get_tensor_model_parallel_rank"):
            module.get_tensor_model_parallel_rank = lambda *a, **k: 0  # type: ignore[attr-defined]
