"""Run vLLM's own CPU offloading spec (v1/kv_offload/cpu/spec.py `CPUOffloadingSpec.__init__`) on CPU: for each
case on stdin (JSON list of {worker_kv_bytes_per_block, tp, pp, blocks_per_chunk, tokens_per_block,
cpu_bytes_to_use}), print the chunks the CPU tier holds and the bytes of one chunk, as JSON on stdout."""

import json
import sys

from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec


def chunks(case: dict) -> dict:
    world = case["tp"] * case["pp"]
    parallel = OffloadingParallelConfig(
        rank=0,
        world_size=world,
        tp_size=case["tp"],
        pp_size=case["pp"],
        pcp_size=1,
        dcp_size=1,
        data_parallel_index=0,
        data_parallel_size=1,
        data_parallel_rank_local=None,
        is_parallelism_agnostic=False,
    )
    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=case["tokens_per_block"], layer_names=("layer",), group_id=0),),
        worker_kv_bytes_per_block=case["worker_kv_bytes_per_block"],
        enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": case["cpu_bytes_to_use"]},
        engine_id="oracle",
        model=OffloadingModelConfig(name="oracle", dtype="bfloat16"),
        cache=OffloadingCacheConfig(
            tokens_per_hash=case["tokens_per_block"], blocks_per_chunk=case["blocks_per_chunk"]
        ),
        parallel=parallel,
    )
    spec = CPUOffloadingSpec(config)
    return {"num_chunks": spec.num_chunks, "kv_bytes_per_chunk": spec.kv_bytes_per_chunk}


print(json.dumps([chunks(case) for case in json.load(sys.stdin)]))
