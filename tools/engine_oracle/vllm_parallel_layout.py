"""vLLM's own rules for the DP-attention / expert-parallel / DCP layouts, run on the CPU: the parallel-layout
engine-oracle runner (tests/test_feature_parallel_layout.py).

Run with the oracle venv's interpreter (tools/engine_oracle/setup_venv.sh builds it), never with the project
venv: it imports vLLM. Standard input: one JSON document

    {"num_experts": E, "ep_size": EP, "redundant_experts": R, "block_size": B, "num_layers": N,
     "dtype": "bfloat16", "dcp": D, "max_model_len": L, "available_memory": BYTES,
     "kv_lora_rank": K, "qk_rope_head_dim": P}                  (MLA; or, for GQA:)
     "total_num_kv_heads": H, "head_size": S, "tp": T}

and it prints one JSON document {"local_experts": [...], "num_blocks", "kv_cache_tokens", "max_concurrency"}:
the experts each EP rank holds, EPLB's R redundant ones among them (model_executor/layers/fused_moe/layer.py
`determine_expert_counts`, expert_map_manager.py `determine_expert_map`), and, for one DP rank whose KV budget
is `available_memory`, a pool of N attention layers as vLLM builds it (MLA: one latent head; GQA: the KV heads
of one rank at TP T, config/model.py `ModelConfig.get_num_kv_heads`; v1/core/kv_cache_planning.py
`get_kv_cache_config_from_groups`) and the 'GPU KV cache size' it prints (v1/core/kv_cache_utils.py
`get_kv_cache_capacity`) with decode context parallel D. The config objects are stand-ins that carry only the
fields those functions read; the functions are the release's own.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace


def main() -> None:
    case = json.loads(sys.stdin.read())
    import torch
    from vllm.config import ModelConfig
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map
    from vllm.model_executor.layers.fused_moe.layer import determine_expert_counts
    from vllm.v1.core.kv_cache_planning import get_kv_cache_config_from_groups
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, MLAAttentionSpec

    physical, _logical, _fused = determine_expert_counts(
        case["num_experts"], case.get("redundant_experts", 0), None, False
    )
    experts = [determine_expert_map(case["ep_size"], rank, physical)[0] for rank in range(case["ep_size"])]
    dtype = getattr(torch, case["dtype"])
    if "total_num_kv_heads" in case:  # GQA: config/model.py ModelConfig.get_num_kv_heads at the rank's TP
        arch = SimpleNamespace(total_num_kv_heads=case["total_num_kv_heads"])
        heads = ModelConfig.get_num_kv_heads(
            SimpleNamespace(use_mla=False, model_arch_config=arch),  # type: ignore[arg-type]
            SimpleNamespace(tensor_parallel_size=case["tp"]),  # type: ignore[arg-type]
        )
        spec = FullAttentionSpec(
            block_size=case["block_size"], num_kv_heads=heads, head_size=case["head_size"], dtype=dtype
        )
    else:
        spec = MLAAttentionSpec(
            block_size=case["block_size"],
            num_kv_heads=1,
            head_size=case["kv_lora_rank"] + case["qk_rope_head_dim"],
            dtype=dtype,
        )
    names = [f"model.layers.{i}.self_attn.attn" for i in range(case["num_layers"])]
    groups = [KVCacheGroupSpec(layer_names=names, kv_cache_spec=spec)]
    from vllm.config import CacheConfig

    cache = CacheConfig(block_size=case["block_size"])
    cache.kv_cache_layout = "NHD"  # what the engine core resolves on CUDA (LBNHC)
    config = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=case["max_model_len"]),
        parallel_config=SimpleNamespace(decode_context_parallel_size=case["dcp"], prefill_context_parallel_size=1),
        cache_config=cache,
        attention_config=SimpleNamespace(hisparse_config=None),
    )
    kv = get_kv_cache_config_from_groups(config, groups, case["available_memory"])  # type: ignore[arg-type]
    tokens, concurrency = get_kv_cache_capacity(config, kv)  # type: ignore[arg-type]
    print(
        json.dumps(
            {
                "local_experts": experts,
                "num_blocks": kv.num_blocks,
                "kv_cache_tokens": tokens,
                "max_concurrency": concurrency,
            }
        )
    )


if __name__ == "__main__":
    main()
