"""SGLang's own LoRA memory pool, built on the CPU: the bytes of the adapter buffers it allocates (oracle runner).

Run with the oracle venv's interpreter, prefixed by tests/conftest.py's SGLANG_CPU_PREAMBLE (SGLang's configs
import torchvision, whose CUDA ops must not load on the CPU torch) and with the venv's `sglang-extra` folder on
PYTHONPATH, as tests/test_engine_sglang.py runs its oracle. One JSON document on stdin:

    {"hidden": H, "heads": N, "kv_heads": K, "head_dim": D, "intermediate": I, "vocab": V, "layers": L,
     "rank": R, "slots": S, "tp": 1, "targets": ["qkv_proj", "o_proj", ...]}

and it prints one line after `@@sglang-lora@@ `: {"sglang_version", "bytes"}: the storage of every buffer
`LoRAMemoryPool.__init__` allocates (lora/mem_pool.py init_buffers: A_buffer, B_buffer, the embedding and
LM head buffers) for a Llama config, in bfloat16. What stands in for a server: the parallel context (TP size
and rank 0 of `get_parallel()`, as each loaded SGLang module reads it; no attention DP, no expert parallel) and
a base model holding one parameter and SGLang's own `ParallelLMHead` (whose shard indices size the head's B).
No SGLang code is copied.
"""

import json
import sys
import types

import sglang
import sglang.srt.layers.vocab_parallel_embedding as vpe
import sglang.srt.lora.mem_pool as mem_pool
import torch
from transformers import LlamaConfig

MARK = "@@sglang-lora@@ "


def main() -> None:
    case = json.load(sys.stdin)
    tp = int(case.get("tp", 1))
    parallel = types.SimpleNamespace(
        tp_size=tp,
        tp_rank=0,
        tp_group=None,
        attn_tp_size=tp,
        attn_tp_rank=0,
        attn_tp_group=None,
        moe_ep_size=1,
        moe_ep_rank=0,
        moe_tp_size=tp,
        moe_tp_rank=0,
    )
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang") and module is not None and hasattr(module, "get_parallel"):
            module.get_parallel = lambda: parallel
    config = LlamaConfig(
        hidden_size=case["hidden"],
        intermediate_size=case["intermediate"],
        num_attention_heads=case["heads"],
        num_key_value_heads=case["kv_heads"],
        head_dim=case["head_dim"],
        num_hidden_layers=case["layers"],
        vocab_size=case["vocab"],
    )

    class Base(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = config
            self.anchor = torch.nn.Parameter(torch.zeros(1))
            self.lm_head = vpe.ParallelLMHead(config.vocab_size, config.hidden_size)

    pool = mem_pool.LoRAMemoryPool(
        config, case["slots"], torch.bfloat16, case["rank"], set(case["targets"]), Base(), "lru", 0
    )
    total = 0
    for buffers in (
        pool.A_buffer,
        pool.B_buffer,
        pool.embedding_A_buffer,
        pool.embedding_B_buffer,
        pool.lm_head_A_buffer,
        pool.lm_head_B_buffer,
    ):
        for value in buffers.values():
            for tensor in value if isinstance(value, list) else [value]:
                total += tensor.numel() * tensor.element_size()
    print(MARK + json.dumps({"sglang_version": sglang.__version__, "bytes": total}))


main()
