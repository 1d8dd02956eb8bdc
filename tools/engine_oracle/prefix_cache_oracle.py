"""Run vLLM's own KV cache manager (v1/core/kv_cache_manager.py KVCacheManager over block_pool.py BlockPool)
on CPU: admit requests that share a prompt prefix, one after another, each prefilled whole and then grown to
its full context, and report how many are running when the pool has no block left for the next one.

Reads JSON on stdin: {"num_blocks", "block_size", "shared_prefix_tokens", "prompt_tokens", "context_tokens",
"enable_caching"}; prints {"admitted": N, "free_blocks": F, "hit_tokens": [...]}. Run in .venv-oracle.
"""

from __future__ import annotations

import json
import sys

import torch
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request


def main() -> None:
    ask = json.load(sys.stdin)
    block_size, context = ask["block_size"], ask["context_tokens"]
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16)
    config = KVCacheConfig(
        num_blocks=ask["num_blocks"], kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)]
    )
    manager = KVCacheManager(
        config,
        max_model_len=context,
        scheduler_block_size=block_size,
        hash_block_size=block_size,
        enable_caching=ask["enable_caching"],
    )
    init_none_hash(sha256)
    hasher = get_request_block_hasher(block_size, sha256)
    shared = list(range(1, ask["shared_prefix_tokens"] + 1))
    admitted, hits = 0, []
    while admitted < 100_000:
        own = [1_000_000 + admitted * 100_000 + i for i in range(ask["prompt_tokens"] - len(shared))]
        request = Request(f"r{admitted}", shared + own, SamplingParams(max_tokens=context), None, block_hasher=hasher)
        computed, hit_tokens, _ = manager.get_computed_blocks(request)
        blocks = manager.allocate_slots(request, request.num_tokens - hit_tokens, hit_tokens, computed)
        if blocks is None:
            break
        request.num_computed_tokens = request.num_tokens
        # grow to the full context (decode): the slots for every generated token
        grown = manager.allocate_slots(request, context - request.num_tokens)
        if grown is None:
            manager.free(request)
            break
        hits.append(hit_tokens)
        admitted += 1
    print(
        json.dumps(
            {"admitted": admitted, "free_blocks": manager.block_pool.get_num_free_blocks(), "hit_tokens": hits[:3]}
        )
    )


if __name__ == "__main__":
    main()
