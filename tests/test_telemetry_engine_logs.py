"""SGLang and TensorRT-LLM startup logs become observations like vLLM logs do (telemetry/sglang_log.py,
trtllm_log.py: dialects of the shared parser), and pasted junk is rejected line by line with a reason.

Fixtures: tests/fixtures/telemetry/logs/sglang_*.log, trtllm_*.log, built from the public logs of
evaluation/data/sglang_public_measurements.yaml and trtllm_public_measurements.yaml (their lines verbatim; the
GPU line, settings dump, version line and the speculative draft's second pool of the H100 SGLang log, and the
trtllm-serve command of the engine log, were added to exercise those rules). Expected values are what the
engine printed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from telemetry.log_dialects import dialect_for
from telemetry.vllm_log import VLLM
from tests.test_telemetry_support import FIXTURES, gib, ingest, observations, only_observation, rejects

LOGS = FIXTURES / "logs"
LLAMA2_A100 = "model: meta-llama/Llama-2-7b-hf\ngpu: A100\n"  # a deployment.yaml sidecar


def _log(tmp_path: Path, name: str, extra: dict[str, str] | None = None) -> Path:
    folder = tmp_path / name.removesuffix(".log")
    folder.mkdir()
    shutil.copy(LOGS / name, folder / "startup.log")
    for rel, content in (extra or {}).items():
        (folder / rel).write_text(content)
    return tmp_path


def test_dialect_is_read_from_the_log() -> None:
    assert dialect_for((LOGS / "sglang_qwq32b_l4_tp4.log").read_text().splitlines()).engine == "sglang"
    assert dialect_for((LOGS / "trtllm_llama8b_fp8_h100.log").read_text().splitlines()).engine == "trtllm"
    assert dialect_for((LOGS / "v1_llama70b_h100_tp4.log").read_text().splitlines()) is VLLM
    # a vLLM log naming FlashInfer's TensorRT-LLM kernels is still a vLLM log
    assert dialect_for(["INFO [flashinfer.py:1] Using TRTLLM attention (TensorRT-LLM gen kernels)",
                        "INFO [gpu_worker.py:1] Available KV cache memory: 56.12 GiB"]) is VLLM  # fmt: skip


def test_sglang_log_with_settings_dump_and_a_draft_pool(tmp_path: Path) -> None:
    result = ingest(_log(tmp_path, "sglang_llama8b_h100_speculative.log"))
    obs = only_observation(result)
    assert (obs["engine"], obs["engine_version"], obs["model_id"]) == ("sglang", "0.4.4.post1",
                                                                       "meta-llama/Llama-3.1-8B-Instruct")  # fmt: skip
    assert obs["gpu_sku"] == "h100-sxm-80gb" and obs["tp"] == 1
    assert obs["gpu_memory_utilization"] == 0.88  # mem_fraction_static
    assert obs["weights_bytes"] == gib(15.11)  # "mem usage" after the weights; SGLang's GB is GiB
    # K + V of the target pool; the draft's second, smaller pool does not replace it
    assert obs["kv_cache_memory_bytes"] == gib(27.02) + gib(27.02) and obs["kv_cache_tokens"] == 442_750
    assert (obs["max_model_len"], obs["max_num_seqs"], obs["max_num_batched_tokens"]) == (131_072, 4096, 8192)
    assert obs["block_size"] == 1 and obs["startup_outcome"] == "started"
    assert result.rejects.is_empty()


def test_sglang_log_of_a_model_outside_the_catalog_is_rejected_whole(tmp_path: Path) -> None:
    # QwQ-32B on 4 x L4 (llms-in-clouds): every recognised line is rejected with the segment's reason
    result = ingest(_log(tmp_path, "sglang_qwq32b_l4_tp4.log"))
    assert result.observations.is_empty()
    codes = {code for _, _, code in rejects(result)}
    assert codes == {"unknown_model"} and len(rejects(result)) == result.files["rejected"][0] == 8
    assert "QwQ-32B" in result.rejects["reason"][0]


def test_sglang_tensor_parallel_ranks_and_a_sidecar_model(tmp_path: Path) -> None:
    sidecar = "model: Qwen/Qwen2.5-32B-Instruct\ngpu: NVIDIA L4\n"
    obs = only_observation(ingest(_log(tmp_path, "sglang_qwq32b_l4_tp4.log", {"deployment.yaml": sidecar})))
    assert (obs["engine"], obs["tp"], obs["gpu_sku"]) == ("sglang", 4, "l4-24gb")
    assert obs["kv_cache_memory_bytes"] == gib(1.42) * 2 and obs["kv_cache_tokens"] == 46_611
    assert obs["weights_bytes"] == gib(15.54) and obs["max_model_len"] == 131_072
    assert obs["startup_outcome"] == "started"


def test_trtllm_log_with_a_max_tokens_cap(tmp_path: Path) -> None:
    sidecar = "model: RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8\ngpu: H100\n"
    obs = only_observation(ingest(_log(tmp_path, "trtllm_llama8b_fp8_h100.log", {"deployment.yaml": sidecar})))
    assert (obs["engine"], obs["engine_version"]) == ("trtllm", "1.0.0rc4")
    assert obs["kv_cache_memory_bytes"] == gib(52.51) and obs["kv_cache_tokens"] == 860_320
    assert obs["block_size"] == 32 and obs["gpu_memory_utilization"] == 0.8
    assert (obs["max_model_len"], obs["max_num_seqs"], obs["max_num_batched_tokens"]) == (157, 4096, 23_552)


def test_trtllm_engine_log_with_command_and_pool(tmp_path: Path) -> None:
    sidecar = "model: meta-llama/Llama-3.1-8B-Instruct\n"
    obs = only_observation(ingest(_log(tmp_path, "trtllm_engine_llama8b_32gb.log", {"deployment.yaml": sidecar})))
    assert obs["engine"] == "trtllm" and obs["gpu_memory_utilization"] == 0.9 and obs["tp"] == 1
    assert obs["total_gpu_memory_bytes"] == gib(31.84) and obs["num_gpu_blocks"] == 8219
    assert obs["kv_cache_memory_bytes"] == gib(16.05) and obs["kv_cache_tokens"] == 263_008
    assert obs["startup_outcome"] == "started"


SGLANG_GOOD = (
    "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp 1 --mem-fraction-static 0.85\n"
    "[2025-03-25 16:37:06 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.48 GB, mem usage=15.11 GB.\n"
    "[2025-03-25 16:37:06 TP0] KV Cache is allocated. #tokens: 442750, K size: 27.02 GB, V size: 27.02 GB\n"
)


def test_sglang_truncated_and_junk_lines_rejected_rest_kept(tmp_path: Path) -> None:
    body = (
        SGLANG_GOOD
        + "[2025-03-25 16:37:06 TP0] KV Cache is allocated. #tokens: 4427\n"  # cut mid-line
        + "[2025-03-25 16:37:20 TP0] max_total_num_tokens=\n"
    ).encode() + b"\xff\xfe KV Cache is allocated. \xc3\x28 garbage\n"
    result = ingest(tmp_path, {"d/startup.log": body})
    assert [(line, code) for _, line, code in rejects(result)] == [(4, "malformed"), (5, "malformed"), (6, "encoding")]
    obs = only_observation(result)
    assert obs["kv_cache_tokens"] == 442_750 and obs["gpu_memory_utilization"] == 0.85
    files = result.files.row(0, named=True)
    assert files["rows_in"] == files["accepted"] + files["rejected"]


def test_binary_junk_is_rejected_whole_with_a_reason(tmp_path: Path) -> None:
    result = ingest(tmp_path, {"d/startup.log": SGLANG_GOOD.encode() + b"\x00\x01\x02 KV Cache is allocated. \x00\n"})
    assert [(line, code) for _, line, code in rejects(result)] == [(None, "encoding")]
    assert result.observations.is_empty()


def test_sglang_absurd_numbers_rejected(tmp_path: Path) -> None:
    absurd = SGLANG_GOOD.replace("K size: 27.02 GB", "K size: 27020000.02 GB").replace("mem usage=15.11", "mem usage=-3")
    summary = "[2025-03-25 16:37:20 TP0] max_total_num_tokens=442750, context_len=131072\n"
    result = ingest(tmp_path, {"d/startup.log": "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + absurd + summary})
    assert sorted(code for _, _, code in rejects(result)) == ["negative", "out_of_range"]
    obs = only_observation(result)
    assert "weights_bytes" not in obs and "kv_cache_memory_bytes" not in obs
    assert obs["kv_cache_tokens"] == 442_750 and obs["gpu_memory_utilization"] == 0.85


def test_sglang_failed_start_is_an_observation(tmp_path: Path) -> None:
    body = SGLANG_GOOD.splitlines(keepends=True)[0] + (
        "[2025-03-12 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=1.02 GB, mem usage=15.11 GB.\n"
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
    )
    obs = only_observation(ingest(tmp_path, {"d/startup.log": body}))
    assert obs["startup_outcome"] == "failed" and "mem-fraction-static" in obs["startup_error"]


def test_trtllm_hostile_lines(tmp_path: Path) -> None:
    body = (
        "trtllm-serve meta-llama/Llama-3.1-8B-Instruct --tp_size 1\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 16.05 GiB for max tokens in paged KV cache (263008)\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 1e999 GiB for max tokens in paged KV cache (1)\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 3.5 GiB for max tokens in paged KV cache (\n"
        "[TensorRT-LLM][INFO] Number of tokens per block: 99999999999999999999999999.\n"
    )
    result = ingest(tmp_path, {"d/startup.log": body})
    assert [code for _, _, code in rejects(result)] == ["malformed", "malformed", "out_of_range"]
    obs = only_observation(result)
    assert obs["kv_cache_memory_bytes"] == gib(16.05) and "block_size" not in obs
    assert len(observations(result)) == 1


def test_trtllm_pool_sized_twice_keeps_the_final_one(tmp_path: Path) -> None:
    # TensorRT-LLM 1.2's PyTorch backend: the estimation run's small pool first, the final pool after it (lines of
    # a public 1.2.0rc2 log; the final line's count, cut in the excerpt, is written as 1,444 blocks x 32)
    body = (
        "trtllm-serve meta-llama/Llama-3.1-8B-Instruct --max_seq_len 9193\n"
        "[TensorRT-LLM] TensorRT LLM version: 1.2.0rc2\n"
        "[TensorRT-LLM][INFO] Max KV cache blocks per sequence: 288 [window size=8224], tokens per block=32, "
        "primary blocks=257, secondary blocks=0, max sequence length=9193\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.56 GiB for max tokens in paged KV cache (8224).\n"
        "[TensorRT-LLM][INFO] Max KV cache blocks per sequence: 288 [window size=9193], tokens per block=32, "
        "primary blocks=1444, secondary blocks=0, max sequence length=9193\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 3.17 GiB for max tokens in paged KV cache (46208).\n"
    )
    obs = only_observation(ingest(tmp_path, {"d/startup.log": body, "d/deployment.yaml": "gpu: H100\n"}))
    assert obs["kv_cache_memory_bytes"] == gib(3.17) and obs["kv_cache_tokens"] == 46_208
    assert obs["num_gpu_blocks"] == 1444 and obs["max_model_len"] == 9193
    assert (obs["engine"], obs["engine_version"]) == ("trtllm", "1.2.0rc2")


def test_trtllm_memory_profiling_terms(tmp_path: Path) -> None:
    # gpt-oss-120b on a 119.70 GiB unified-memory device (a public TensorRT-LLM 1.x log, lines verbatim); the
    # budget rule is printed: (119.70 - 113.65 + 0.56 estimation pool) x 0.9 = 5.95 GiB
    sidecar = "model: openai/gpt-oss-120b\n"
    obs = only_observation(ingest(_log(tmp_path, "trtllm_gpt_oss_120b_gb10.log", {"deployment.yaml": sidecar})))
    assert obs["engine"] == "trtllm" and obs["total_gpu_memory_bytes"] == gib(119.70)
    assert (obs["weights_bytes"], obs["activation_peak_bytes"], obs["non_torch_bytes"]) == (gib(63.52), gib(0.85),
                                                                                           gib(49.28))  # fmt: skip
    assert obs["non_kv_bytes"] == gib(113.65) and obs["gpu_memory_utilization"] == 0.9
    assert obs["kv_cache_memory_bytes"] == gib(5.95) and obs["kv_cache_tokens"] == 86_720  # the final pool
    assert obs["max_model_len"] == 86_720 and obs["startup_outcome"] == "started"
    assert round((119.70 - 113.65 + 0.56) * 0.9, 2) == 5.95


def test_sglang_observation_is_predicted_with_its_release_rules(tmp_path: Path) -> None:
    # the observation goes through the same prediction as a vLLM one; its 0.4.4.post1 release takes 0.4.x's
    # default fraction, and the fraction the log states (0.88) is used: the measured pool is 27.02 + 27.02 GiB
    from models_registry.planning import bundled_catalog
    from telemetry.predictions import predict_row

    result = ingest(_log(tmp_path, "sglang_llama8b_h100_speculative.log"))
    row = result.observations.row(0, named=True)
    _, out = predict_row(row, bundled_catalog(["meta-llama/Llama-3.1-8B-Instruct"], ["h100-sxm-80gb"]))
    assert (out["prediction_status"], out["engine"], out["engine_version"]) == ("predicted", "sglang", "0.4.4.post1")
    assert out["measured_kv_pool_bytes"] == gib(27.02) * 2
    assert abs(out["predicted_kv_pool_bytes"] / out["measured_kv_pool_bytes"] - 1) < 0.005


def test_trtllm_pre_1_0_pool_in_bytes(tmp_path: Path) -> None:
    # TensorRT-LLM issue #1400 (v0.8, a Llama-2-7B-shaped engine on an A100; lines verbatim, the model sidecar is
    # this test's inference: 69,524,783,104 B / 132,608 tokens = 512 KiB = 32 layers x 32 heads x 128 x 2 x fp16)
    log = (
        "[TensorRT-LLM][INFO] [MemUsageChange] TensorRT-managed allocation in IExecutionContext creation: CPU +0, GPU +0, now: CPU 0, GPU 6683 (MiB)\n"
        "[TensorRT-LLM][INFO] Allocate 69524783104 bytes for k/v cache. \n"
        "[TensorRT-LLM][INFO] Using 132608 tokens in paged KV cache.\n"
    )
    obs = only_observation(ingest(tmp_path, {"v08/startup.log": log, "v08/deployment.yaml": LLAMA2_A100}))
    assert obs["engine"] == "trtllm"
    assert obs["kv_cache_memory_bytes"] == 69_524_783_104 and obs["kv_cache_tokens"] == 132_608


def test_trtllm_0_10_tokens_and_bytes_on_one_line(tmp_path: Path) -> None:
    # tensorrtllm_backend#456 (May 2024, TensorRT-LLM main e239adcf): the line verbatim; a Llama-2-7B sidecar
    # stands in for Gemma-7B (not in the catalog): only the parse is under test
    log = (
        "[TensorRT-LLM][INFO] Max KV cache pages per sequence: 25\n"
        "[TensorRT-LLM][INFO] Max tokens in paged KV cache: 117760. Allocating 54022635520 bytes.\n"
    )
    obs = only_observation(ingest(tmp_path, {"v010/startup.log": log, "v010/deployment.yaml": LLAMA2_A100}))
    assert obs["kv_cache_memory_bytes"] == 54_022_635_520 and obs["kv_cache_tokens"] == 117_760
