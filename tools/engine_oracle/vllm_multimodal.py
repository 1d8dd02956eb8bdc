"""Runs in the engine-oracle venv: vLLM 0.33's own multimodal budget code and transformers' VL models.

Reads a JSON request on stdin, writes JSON on stdout. For each budget case: `compute_mm_encoder_budget`
(v1/core/encoder_cache_manager.py) and `MultiModalBudget._get_max_items` (multimodal/encoder_budget.py)
called on stand-in config objects; for each resize case: transformers' Qwen3-VL video
`smart_resize`; for each config: the parameter count of
transformers' model built on the meta device (no weights, no download)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def budgets(cases: list[dict]) -> list[list[int]]:
    from vllm.multimodal.encoder_budget import MultiModalBudget
    from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget

    out = []
    for c in cases:
        sched = SimpleNamespace(
            max_num_batched_tokens=c["batched"],
            max_num_encoder_input_tokens=c["batched"],
            encoder_cache_size=c["batched"],
            disable_chunked_mm_input=False,
            enable_chunked_prefill=True,
        )
        compute, cache = compute_mm_encoder_budget(sched, {"image": c["item"]})
        stub = SimpleNamespace(
            get_encoder_budget=lambda compute=compute, cache=cache: min(compute, cache),
            mm_limits={"image": c["limit"]},
            max_model_len=c["max_model_len"],
            scheduler_config=sched,
            max_num_reqs=c["seqs"],
        )
        _, per_batch = MultiModalBudget._get_max_items(stub, "image", c["item"])
        out.append([min(compute, cache), per_batch])
    return out


def resizes(cases: list[list[int]]) -> list[list[int]]:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize

    return [list(smart_resize(n, h, w, t, f, lo, hi)) for n, h, w, t, f, lo, hi in cases]


def params(configs: list[dict]) -> list[int]:
    import torch
    import transformers

    out = []
    for cfg in configs:
        config = transformers.AutoConfig.for_model(**cfg)
        with torch.device("meta"):
            model = transformers.AutoModelForImageTextToText.from_config(config)
        out.append(sum(p.numel() for p in model.parameters()))
    return out


def main() -> None:
    request = json.load(sys.stdin)
    json.dump(
        {
            "budgets": budgets(request["budgets"]),
            "params": params(request["params"]),
            "resizes": resizes(request.get("resizes", [])),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
