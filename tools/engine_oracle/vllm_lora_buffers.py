"""vLLM's own LoRA layers, built on the CPU: the bytes of the adapter slots they allocate (oracle runner).

Run with the oracle venv's interpreter (tools/engine_oracle/setup_venv.sh), never the project venv: it
imports vLLM. One JSON document on stdin:

    {"hidden": H, "heads": N, "kv_heads": K, "head_dim": D, "intermediate": I, "vocab": V,
     "rank": R, "slots": L, "dtype": "bfloat16", "tp": 1, "fully_sharded": false}

and it prints one JSON line after `@@lora-oracle@@ `: {"vllm_version", "bytes": {module: bytes}} for the
modules of one Llama decoder layer (qkv_proj, o_proj, gate_up_proj, down_proj) and the embedding and LM
head, each wrapped by the release's own LoRA class (MergedQKVParallelLinearWithLoRA,
RowParallelLinearWithLoRA, MergedColumnParallelLinearWithLoRA, VocabParallelEmbeddingWithLoRA,
LogitsProcessorWithLoRA; the `...WithShardedLoRA` classes with `fully_sharded`), after its own
`create_lora_weights` ran with a `LoRAConfig`: the bytes are the storage of `lora_a_stacked` and
`lora_b_stacked`. A single gloo process stands in for the TP group; at `tp` > 1 the TP size and rank
the layers read (`get_tensor_model_parallel_world_size` / `_rank`, as each module imported them) answer
`tp` and 0, so the layers shard as rank 0 of that group does. No vLLM code is copied.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from vllm_tp_rank import patch_tp

MARK = "@@lora-oracle@@ "


def main() -> None:
    case = json.load(sys.stdin)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    import vllm
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.config.lora import LoRAConfig
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    dtype = getattr(torch, case.get("dtype", "bfloat16"))
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, distributed_init_method="tcp://127.0.0.1:0", backend="gloo"
        )
        initialize_model_parallel(1, 1)
        from vllm.lora import layers as lora_layers
        from vllm.model_executor.layers.linear import (
            MergedColumnParallelLinear,
            QKVParallelLinear,
            RowParallelLinear,
        )
        from vllm.model_executor.layers.logits_processor import LogitsProcessor
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

        patch_tp(int(case.get("tp", 1)))
        sharded = bool(case.get("fully_sharded", False))
        h, heads, kv, d, inter, vocab = (
            case[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab")
        )
        config = LoRAConfig(
            max_lora_rank=case["rank"], max_loras=case["slots"], lora_dtype=dtype, fully_sharded_loras=sharded
        )
        suffix = "WithShardedLoRA" if sharded else "WithLoRA"
        qkv_cls = getattr(lora_layers, "MergedQKVParallelLinear" + suffix)
        row_cls = getattr(lora_layers, "RowParallelLinear" + suffix)
        col_cls = getattr(lora_layers, "MergedColumnParallelLinear" + suffix)
        modules = {
            "qkv_proj": qkv_cls(QKVParallelLinear(h, d, heads, kv, bias=False, params_dtype=dtype)),
            "o_proj": row_cls(RowParallelLinear(heads * d, h, bias=False, params_dtype=dtype)),
            "gate_up_proj": col_cls(MergedColumnParallelLinear(h, [inter, inter], bias=False, params_dtype=dtype)),
            "down_proj": row_cls(RowParallelLinear(inter, h, bias=False, params_dtype=dtype)),
            "embed_tokens": lora_layers.VocabParallelEmbeddingWithLoRA(
                VocabParallelEmbedding(vocab, h, params_dtype=dtype)
            ),
            "lm_head": lora_layers.LogitsProcessorWithLoRA(LogitsProcessor(vocab), h, dtype, torch.device("cpu"), None),
        }
        out = {}
        for name, module in modules.items():
            module.create_lora_weights(config.max_loras, config)
            tensors = []
            for stacked in (module.lora_a_stacked, module.lora_b_stacked):
                tensors += list(stacked) if isinstance(stacked, tuple) else [stacked]
            out[name] = sum(t.numel() * t.element_size() for t in tensors)
    print(MARK + json.dumps({"vllm_version": vllm.__version__, "bytes": out}))


if __name__ == "__main__":
    main()
