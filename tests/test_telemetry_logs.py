"""vLLM startup logs: V0, recent V1 (TP ranks, banner, stats), hybrid models, failures, variants of
the memory-profiling message, and every way a pasted log goes wrong."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.test_telemetry_support import FIXTURES, gib, ingest, observations, only_observation, rejects

LOGS = FIXTURES / "logs"


def _log(tmp_path: Path, name: str, extra: dict[str, str | bytes] | None = None) -> Path:
    folder = tmp_path / name.removesuffix(".log")
    folder.mkdir()
    shutil.copy(LOGS / name, folder / "startup.log")
    for rel, content in (extra or {}).items():
        target = folder / rel
        target.write_text(content) if isinstance(content, str) else target.write_bytes(content)
    return tmp_path


def test_v0_log_with_nvidia_smi_and_namespace_args(tmp_path: Path) -> None:
    result = ingest(_log(tmp_path, "v0_llama2_a10g.log"))
    obs = only_observation(result)
    assert obs["deployment_id"] == "v0_llama2_a10g"
    assert obs["model_id"] == "meta-llama/Llama-2-7b-hf"
    assert obs["gpu_sku"] == "a10g-24gb" and obs["gpu_name_raw"] == "NVIDIA A10G"
    assert (obs["engine_version"], obs["engine_generation"]) == ("0.5.4", "v0")
    assert (obs["tp"], obs["pp"], obs["max_model_len"], obs["block_size"]) == (1, 1, 4096, 16)
    assert obs["weight_dtype"] == "float16"  # the engine config line wins over args' dtype='auto'
    assert obs["gpu_memory_utilization"] == 0.9 and obs["max_num_seqs"] == 256
    assert obs["weights_bytes"] == gib(12.5523)  # vLLM's "GB" is GiB
    assert (obs["num_gpu_blocks"], obs["num_cpu_blocks"]) == (668, 512)
    assert obs["startup_outcome"] == "started"
    assert (obs["peak_kv_usage"], obs["peak_requests_running"], obs["peak_requests_waiting"]) == (0.978, 7, 3)
    assert result.rejects.is_empty()


def test_v1_log_tensor_parallel_ranks_combine_like_the_engine(tmp_path: Path) -> None:
    result = ingest(_log(tmp_path, "v1_llama70b_h100_tp4.log"))
    obs = only_observation(result)
    assert obs["model_id"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert obs["gpu_sku"] == "h100-sxm-80gb"
    assert (obs["engine_version"], obs["engine_generation"], obs["tp"]) == ("0.11.0", "v1", 4)
    assert obs["max_model_len"] == 32768  # --max-model-len 32K and the config line agree
    assert obs["enable_prefix_caching"] is True and obs["max_num_batched_tokens"] == 8192
    assert obs["weights_bytes"] == gib(32.8867)
    assert obs["kv_cache_memory_bytes"] == gib(38.09)  # the tightest rank
    assert obs["cuda_graph_bytes"] == gib(1.23)
    assert (obs["kv_cache_tokens"], obs["max_concurrency"], obs["max_concurrency_tokens"]) == (499_248, 15.24, 32_768)
    assert obs["peak_kv_usage"] == pytest.approx(0.963) and obs["peak_requests_waiting"] == 4
    assert obs["startup_outcome"] == "started"
    assert obs["input_rows"] == result.files["accepted"][0] == 27


def test_v1_debug_profiling_terms(tmp_path: Path) -> None:
    obs = only_observation(ingest(_log(tmp_path, "v1_debug_llama8b_h100.log")))
    assert obs["engine_version"] == "0.19.0"  # from the banner
    assert obs["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert obs["total_gpu_memory_bytes"] == gib(79.19)
    assert obs["requested_memory_bytes"] == gib(75.23) and obs["gpu_memory_utilization"] == 0.95
    assert obs["weights_bytes"] == gib(14.99)
    assert obs["activation_peak_bytes"] == gib(0.77)
    assert obs["non_torch_bytes"] == gib(0.25)  # not the 0.51 GiB of the init snapshot
    assert obs["non_kv_bytes"] == gib(13.57)
    assert obs["cuda_graph_bytes"] == gib(0.84)  # the estimate, as nothing measured it
    assert obs["kv_cache_memory_bytes"] == gib(61.66)
    assert (obs["max_num_seqs"], obs["max_num_batched_tokens"]) == (1024, 8192)
    assert "gpu_sku" not in obs and obs["startup_outcome"] == "unknown"


def test_hybrid_model_log_keeps_the_forced_block_size(tmp_path: Path) -> None:
    obs = only_observation(ingest(_log(tmp_path, "hybrid_qwen3next_h200_tp4.log")))
    assert obs["model_id"] == "Qwen/Qwen3-Next-80B-A3B-Instruct"
    assert obs["served_model_name"] == "qwen3-next"
    assert obs["gpu_sku"] == "h200-sxm-141gb"  # from device_name=NVIDIA_H200 in a MoE warning
    assert obs["block_size"] == 528
    assert obs["enable_prefix_caching"] is False
    assert (obs["kv_cache_tokens"], obs["max_concurrency"], obs["max_model_len"]) == (1_898_688, 28.77, 262_144)
    assert obs["kv_cache_memory_bytes"] == gib(86.93)


def test_failed_start_is_an_observation(tmp_path: Path) -> None:
    obs = only_observation(ingest(_log(tmp_path, "failed_llama8b_l4.log")))
    assert obs["startup_outcome"] == "failed"
    assert "16.00 GiB" in obs["startup_error"]
    assert obs["gpu_sku"] == "l4-24gb"  # from `nvidia-smi --query-gpu=name,memory.total --format=csv`
    assert obs["max_model_len"] == 131_072 and obs["kv_cache_memory_bytes"] == gib(4.21)


def test_docker_command_local_path_and_sidecar(tmp_path: Path) -> None:
    sidecar = "gpu: NVIDIA A100-SXM4-80GB\nobserved_at: 2024-10-21T14:31:00Z\n"
    obs = only_observation(ingest(_log(tmp_path, "docker_local_path.log", {"deployment.yaml": sidecar})))
    assert obs["model_id"] == "meta-llama/Llama-3.1-8B-Instruct"  # /models/Meta-Llama-3.1-8B-Instruct
    assert obs["model_name_raw"] == "/models/Meta-Llama-3.1-8B-Instruct"
    assert obs["engine_version"] == "0.6.3.post1"
    assert obs["gpu_sku"] == "a100-sxm-80gb" and obs["observed_at_source"] == "sidecar"
    assert obs["observed_at"].isoformat() == "2024-10-21T14:31:00+00:00"
    assert (obs["num_gpu_blocks"], obs["max_concurrency"], obs["gpu_memory_utilization"]) == (27863, 27.21, 0.92)


PREFIX = "vllm serve meta-llama/Llama-3.1-8B-Instruct\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            "INFO 11-20 10:00:01 model_runner.py:1072] Loading model weights took 14.9888 GB\n"
            "INFO 11-20 10:00:05 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
            "initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB memory_usage_post_profile=15.35GiB "
            "non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90\n"
            "INFO 11-20 10:00:05 gpu_executor.py:113] # GPU blocks: 1951, # CPU blocks: 2048\n",
            {
                "total_gpu_memory_bytes": gib(23.58),
                "activation_peak_bytes": gib(17.06) - gib(14.9888),  # peak_torch includes the weights
                "non_torch_bytes": gib(0.35),
                "kv_cache_memory_bytes": gib(3.81),
                "gpu_memory_utilization": 0.9,
                "num_gpu_blocks": 1951,
            },
            id="v0.6.4-one-line",
        ),
        pytest.param(
            "INFO 12-13 19:54:18 worker.py:243] Memory profiling results:\n"
            "INFO 12-13 19:54:18 worker.py:243] duration     0.75 seconds\n"
            "INFO 12-13 19:54:18 worker.py:243] total_gpu_memory     79.22GiB\n"
            "INFO 12-13 19:54:18 worker.py:243] gpu_memory_utilization       0.90\n"
            "INFO 12-13 19:54:18 worker.py:243] the current vLLM instance can use    71.29GiB\n"
            "INFO 12-13 19:54:18 worker.py:243] model weights take   14.96GiB\n"
            "INFO 12-13 19:54:18 worker.py:243] non_torch_memory     1.79GiB\n"
            "INFO 12-13 19:54:18 worker.py:243] PyTorch activation peak memory       1.26GiB\n"
            "INFO 12-13 19:54:18 worker.py:243] available_kv_cache_memory    53.29GiB\n",
            {
                "total_gpu_memory_bytes": gib(79.22),
                "gpu_memory_utilization": 0.9,
                "requested_memory_bytes": gib(71.29),
                "weights_bytes": gib(14.96),
                "non_torch_bytes": gib(1.79),
                "activation_peak_bytes": gib(1.26),
                "kv_cache_memory_bytes": gib(53.29),
            },
            id="v0.6.5-table",
        ),
        pytest.param(
            "INFO 01-16 09:40:00 worker.py:238] Memory profiling takes 5.41 seconds\n"
            "the current vLLM instance can use total_gpu_memory (79.22GiB) x gpu_memory_utilization (0.90) = 71.29GiB\n"
            "model weights take 14.99GiB; non_torch_memory takes 0.16GiB; PyTorch activation peak memory takes "
            "1.23GiB; the rest of the memory reserved for KV Cache is 54.91GiB.\n"
            "INFO 01-16 09:40:00 executor_base.py:95] # CUDA blocks: 28113, # CPU blocks: 2048\n"
            "INFO 01-16 09:40:00 executor_base.py:99] Maximum concurrency for 131072 tokens per request: 3.43x\n",
            {
                "total_gpu_memory_bytes": gib(79.22),
                "gpu_memory_utilization": 0.9,
                "requested_memory_bytes": gib(71.29),
                "weights_bytes": gib(14.99),
                "non_torch_bytes": gib(0.16),
                "activation_peak_bytes": gib(1.23),
                "kv_cache_memory_bytes": gib(54.91),
                "num_gpu_blocks": 28113,
                "max_concurrency": 3.43,
                "max_model_len": 131072,
            },
            id="v0.7-multi-line",
        ),
        pytest.param(
            "Model loading took 51.1 GiB memory and 12.582087 seconds\n"
            "Graph capturing finished in 14 s (0.62 GiB)\n"
            "CUDA graph pool memory: 0.3 GiB (actual) / 0.69 GiB (estimated)\n"
            "Available KV cache memory: 21.24 GiB\n"
            "GPU KV cache size: 314,187 tokens,\n"
            "Maximum concurrency for 8,192 tokens per request: 38.35x\n"
            "GPU blocks: 1952, # CPU blocks: 2048\n",
            {
                "weights_bytes": gib(51.1),
                "cuda_graph_bytes": gib(0.62),
                "kv_cache_memory_bytes": gib(21.24),
                "kv_cache_tokens": 314_187,
                "max_concurrency": 38.35,
                "num_gpu_blocks": 1952,  # a paste that lost its "# "
            },
            id="v0.29-and-mangled",
        ),
    ],
)
def test_memory_profiling_variants(tmp_path: Path, body: str, expected: dict[str, object]) -> None:
    obs = only_observation(ingest(tmp_path, {"d/startup.log": PREFIX + body}))
    assert {k: obs.get(k) for k in expected} == expected


GOOD = (
    "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n"
    "(EngineCore_DP0 pid=9) INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 4.1 seconds\n"
    "(EngineCore_DP0 pid=9) INFO 10-14 08:04:19 [gpu_worker.py:298] Available KV cache memory: 56.12 GiB\n"
)


def test_truncated_line_rejected_rest_kept(tmp_path: Path) -> None:
    body = (
        GOOD + "(EngineCore_DP0 pid=9) INFO 10-14 08:04:20 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tok\n"
    )
    result = ingest(tmp_path, {"d/startup.log": body})
    assert rejects(result) == [("d/startup.log", 4, "malformed")]
    assert "truncated" in result.rejects["reason"][0]
    assert only_observation(result)["kv_cache_memory_bytes"] == gib(56.12)


def test_negative_value_rejected(tmp_path: Path) -> None:
    body = GOOD.replace("56.12 GiB", "-2.31 GiB")
    result = ingest(tmp_path, {"d/startup.log": body})
    assert rejects(result) == [("d/startup.log", 3, "negative")]
    assert "kv_cache_memory_bytes" not in only_observation(result)


def test_value_above_the_gpu_memory_rejected(tmp_path: Path) -> None:
    body = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + GOOD.replace("14.99 GiB", "149.9 GiB")
    result = ingest(tmp_path, {"d/startup.log": body})
    assert rejects(result) == [("d/startup.log", 3, "out_of_range")]
    assert "exceeds the GPU" in result.rejects["reason"][0]
    obs = only_observation(result)
    assert "weights_bytes" not in obs and obs["kv_cache_memory_bytes"] == gib(56.12)


def test_unknown_model_rejects_every_line_of_the_engine_start(tmp_path: Path) -> None:
    result = ingest(tmp_path, {"d/startup.log": GOOD.replace("meta-llama/Llama-3.1-8B-Instruct", "acme/secret-13b")})
    assert rejects(result) == [("d/startup.log", n, "unknown_model") for n in (1, 2, 3)]
    assert "acme/secret-13b" in result.rejects["reason"][0]
    assert result.observations.is_empty()


def test_unknown_gpu_rejects_the_engine_start(tmp_path: Path) -> None:
    body = "GPU 0: NVIDIA GeForce RTX 9090 Ti (UUID: GPU-1)\n" + GOOD
    result = ingest(tmp_path, {"d/startup.log": body})
    assert {code for _, _, code in rejects(result)} == {"unknown_gpu"} and len(rejects(result)) == 4
    assert result.observations.is_empty()


def test_no_model_and_settings_only_are_missing_fields(tmp_path: Path) -> None:
    result = ingest(
        tmp_path,
        {
            "a/startup.log": "INFO 10-14 08:04:19 [gpu_worker.py:298] Available KV cache memory: 56.12 GiB\n",
            "b/startup.log": "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2\n",
        },
    )
    assert rejects(result) == [("a/startup.log", 1, "missing_field"), ("b/startup.log", 1, "missing_field")]


def test_sidecar_names_the_model_of_a_log_without_one(tmp_path: Path) -> None:
    result = ingest(
        tmp_path,
        {
            "a/startup.log": "INFO 10-14 08:04:19 [gpu_worker.py:298] Available KV cache memory: 56.12 GiB\n",
            "a/startup.log.meta.yaml": "model: meta-llama/Llama-3.1-8B-Instruct\ngpu: H100\ntp: 1\n",
        },
    )
    obs = only_observation(result)
    assert (obs["model_id"], obs["gpu_sku"], obs["tp"]) == ("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", 1)


def test_wrapped_args_dict_is_joined_and_a_cut_one_rejected(tmp_path: Path) -> None:
    wrapped = (
        "(APIServer pid=1) INFO 05-01 12:48:00 [utils.py:233] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct',"
        " 'model': 'meta-llama/Llama-3.1-8B-Inst\nruct', 'dtype': 'half', 'max_model_len': 4096}\n"
        "(EngineCore_DP0 pid=9) INFO 10-14 08:04:19 [gpu_worker.py:298] Available KV cache memory: 56.12 GiB\n"
    )
    result = ingest(tmp_path, {"a/startup.log": wrapped})
    obs = only_observation(result)
    assert (obs["model_id"], obs["weight_dtype"], obs["max_model_len"]) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "float16",
        4096,
    )
    cut = GOOD + "(APIServer pid=1) INFO 05-01 12:48:00 [utils.py:233] non-default args: {'model': 'meta-llama/Ll\n"
    result = ingest(tmp_path, {"b/startup.log": cut})
    assert ("b/startup.log", 4, "malformed") in rejects(result)


def test_restart_in_one_log_gives_two_observations(tmp_path: Path) -> None:
    restarted = GOOD + GOOD.replace("--max-model-len 8192", "--max-model-len 4096").replace("56.12", "57.50")
    result = ingest(tmp_path, {"d/startup.log": restarted})
    rows = observations(result)
    assert [(o["max_model_len"], o["kv_cache_memory_bytes"]) for o in rows] == [(8192, gib(56.12)), (4096, gib(57.5))]
    assert len({o["observation_id"] for o in rows}) == 2


def test_same_log_dropped_twice_is_a_duplicate(tmp_path: Path) -> None:
    result = ingest(tmp_path, {"a/startup.log": GOOD, "a/startup-copy.log": GOOD})
    assert rejects(result) == [("a/startup.log", None, "duplicate")]  # sorted: startup-copy.log comes first
    assert len(observations(result)) == 1


def test_command_line_flags(tmp_path: Path) -> None:
    body = (
        "$ CUDA_VISIBLE_DEVICES=0,1 vllm serve /models/Llama-3.1-70B-Instruct -tp=2 --pipeline-parallel-size 2 \\\n"
        "    --max-model-len 16k --gpu-memory-utilization=0.85 --kv-cache-dtype fp8_e4m3 \\\n"
        "    --dtype bfloat16 --enable-prefix-caching --block-size 32 --max-num-seqs 128\n"
        "INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 33.6 GiB and 9.9 seconds\n"
    )
    result = ingest(tmp_path, {"d/startup.log": body})
    obs = only_observation(result)
    assert obs["model_id"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert (obs["tp"], obs["pp"], obs["max_model_len"], obs["gpu_memory_utilization"]) == (2, 2, 16000, 0.85)
    assert (obs["kv_cache_dtype"], obs["weight_dtype"], obs["block_size"], obs["max_num_seqs"]) == (
        "fp8_e4m3",
        "bfloat16",
        32,
        128,
    )
    assert obs["enable_prefix_caching"] is True
    files = result.files.row(0, named=True)
    assert (files["lines_total"], files["rows_in"], files["lines_ignored"]) == (4, 2, 0)
