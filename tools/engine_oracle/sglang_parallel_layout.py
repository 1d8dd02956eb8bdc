"""SGLang's own rules for DP attention, run on the CPU: the parallel-layout engine-oracle runner for SGLang
(tests/test_feature_parallel_layout.py).

Run with the oracle venv's interpreter, `sglang-extra` on PYTHONPATH (tools/engine_oracle/setup_venv.sh fills
it), never with the project venv: it imports SGLang. Standard input: one JSON document

    {"tp": T, "dp": D, "max_running_requests": R, "token_capacity": N, "context_len": L}

and it prints one JSON document {"attn_tp_size", "max_running_requests_per_rank"}: the attention-TP width of
one DP group (runtime_context.py `derive_attn_tp_size`) and the running cap one DP rank's scheduler takes
(mem_cache/kv_cache_configurator.py `KVCacheConfigurator.resolve_max_num_reqs`, on a stand-in configurator
that carries only the fields it reads: no Mamba state, no speculative decoding).
"""

import json
import sys
import types


def main() -> None:
    case = json.loads(sys.stdin.read())
    import sglang.srt.mem_cache.kv_cache_configurator as kc
    from sglang.srt.runtime_context import derive_attn_tp_size

    attn_tp = derive_attn_tp_size(tp_size=case["tp"], attn_cp_size=1, attn_dp_size=case["dp"])
    sched = types.SimpleNamespace(max_running_requests=case["max_running_requests"], max_mamba_cache_size=None)
    kc.get_schedule = lambda: sched  # type: ignore[attr-defined]
    configurator = object.__new__(kc.KVCacheConfigurator)
    configurator.attn_dp_size = case["dp"]
    configurator.mambaish_config = None
    configurator.model_config = types.SimpleNamespace(context_len=case["context_len"])
    configurator.spec_algorithm = types.SimpleNamespace(is_none=lambda: True)
    per_rank = configurator.resolve_max_num_reqs(case["token_capacity"])
    print(json.dumps({"attn_tp_size": attn_tp, "max_running_requests_per_rank": per_rank}))


if __name__ == "__main__":
    main()
