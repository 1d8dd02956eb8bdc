"""Engine settings that change the memory capplan predicts (--enforce-eager) or that it does not size
(LoRA, speculative decoding, CPU offload, DP attention), read from pasted vLLM and SGLang logs into
the observation, and carried to the prediction: no graph estimate deducted without graphs, and the
deployment flagged not modelled (reported, never fitted)."""

from __future__ import annotations

from pathlib import Path

from capacity.calibration import observed_deployment
from capacity.estimate import estimate
from capacity.features.speculative import SpecMethod
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from telemetry.predictions import settings_of
from tests.test_telemetry_support import ingest, only_observation

VLLM = (
    "$ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --enforce-eager --enable-lora \\\n"
    "    --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 3}' --cpu-offload-gb 0\n"
    "INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 9.9 seconds\n"
)
SGLANG = (
    "[2025-03-08 12:29:04] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=2, mem_fraction_static=0.85, "
    "disable_cuda_graph=True, enable_dp_attention=True, speculative_algorithm=None, enable_lora=None, cpu_offload_gb=4)\n"
    "[2025-03-08 12:29:20 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB\n"
)


def test_vllm_flags_become_settings_and_features(tmp_path: Path) -> None:
    obs = only_observation(ingest(tmp_path, {"d/startup.log": VLLM}))
    assert obs["enforce_eager"] is True
    assert obs["unmodelled_features"] == "lora,speculative"  # --cpu-offload-gb 0 offloads nothing


def test_sglang_server_args_become_settings_and_features(tmp_path: Path) -> None:
    obs = only_observation(ingest(tmp_path, {"s/startup.log": SGLANG}))
    assert obs["engine"] == "sglang" and obs["enforce_eager"] is True  # --disable-cuda-graph
    assert obs["unmodelled_features"] == "cpu_offload,dp_attention"  # None and 0 switch nothing on


def test_a_kv_connector_is_a_feature(tmp_path: Path) -> None:
    lmcache = (  # vllm#21348's command (LMCache's connector)
        "$ vllm serve Qwen/Qwen3-8B --kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}'\n"
        + VLLM.splitlines()[-1] + "\n"
    )
    obs = only_observation(ingest(tmp_path, {"l/startup.log": lmcache}))
    assert obs["unmodelled_features"] == "kv_connector"


def test_no_flags_no_features(tmp_path: Path) -> None:
    plain = "$ vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192\n" + VLLM.splitlines()[-1] + "\n"
    obs = only_observation(ingest(tmp_path, {"p/startup.log": plain}))
    assert obs.get("enforce_eager") is None and obs.get("unmodelled_features") is None


def test_the_prediction_deducts_no_graphs_and_sizes_the_stated_features(tmp_path: Path) -> None:
    """LoRA at vLLM's defaults, the stated EAGLE method with an assumed head (no draft named): sized; a row that
    says only that speculative decoding ran (no method) stays flagged."""
    obs = only_observation(ingest(tmp_path, {"d/startup.log": VLLM}))
    resolved = load_model("meta-llama/Llama-3.1-8B-Instruct")
    deployment = observed_deployment(resolved.spec, settings_of(obs | {"engine_version": "0.33.0"}))
    assert deployment.enforce_eager and deployment.lora and deployment.speculative
    assert deployment.speculative.method is SpecMethod.EAGLE and deployment.speculative.num_speculative_tokens == 3
    est = estimate(resolved.spec, deployment, gpu=find_gpu_sku("H100"), checkpoint_bytes=resolved.checkpoint_bytes)
    assert est.cuda_graph_bytes_per_gpu == 0 and est.not_modelled is None
    assert est.lora is not None and est.lora.slots == 1 and est.lora.rank == 16  # vLLM LoRAConfig's defaults
    unstated = observed_deployment(resolved.spec, settings_of(obs | {"speculative_config": None}))
    est = estimate(resolved.spec, unstated, gpu=find_gpu_sku("H100"), checkpoint_bytes=resolved.checkpoint_bytes)
    assert est.not_modelled is not None and "speculative" in est.not_modelled


# vllm#23278's H100 log (the 0.10.1 era) and the 0.10.2-0.11.x selection lines, as vLLM prints them
MARLIN_WARNING = (
    "(EngineCore_0 pid=5839) WARNING 08-20 18:04:08 [marlin_utils_fp4.py:196] Your GPU does not have native support "
    "for FP4 computation but FP4 quantization is being used. Weight-only FP4 compression will be used leveraging the "
    "Marlin kernel. This may degrade performance for compute-heavy workloads.\n"
)


def _gpt_oss_log(backend_line: str) -> str:
    return ("$ vllm serve openai/gpt-oss-120b --max-model-len 8192\n" + backend_line
            + "INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 64.38 GiB and 9.9 seconds\n")  # fmt: skip


def test_the_mxfp4_backend_line_says_whether_triton_kernels_ran(tmp_path: Path) -> None:
    triton = "(EngineCore_DP0 pid=1) INFO 10-14 08:03:30 [mxfp4.py:94] Using Triton backend\n"
    marlin = "(EngineCore_DP0 pid=1) INFO 10-14 08:03:30 [mxfp4.py:91] Using Marlin backend\n"
    attention = "(EngineCore_DP0 pid=1) INFO 10-14 08:03:30 [cuda.py:300] Using Triton backend on V1 engine.\n"
    cases = {"t": triton, "m": marlin, "w": MARLIN_WARNING, "a": attention}
    seen = {key: only_observation(ingest(tmp_path / key, {f"{key}/startup.log": _gpt_oss_log(line)})).get("triton_kernels")
            for key, line in cases.items()}  # fmt: skip
    assert seen == {"t": True, "m": False, "w": False, "a": None}  # an attention backend's line is not the MoE's


def test_the_prediction_takes_the_backend_the_log_shows(tmp_path: Path) -> None:
    """0.11 on an H100: Marlin pads gpt-oss-120b's experts (H 2880 -> 3072, I 2880 -> 2944), 1.59 GiB more."""
    resolved = load_model("openai/gpt-oss-120b")
    weights = {}
    for key, line in {"t": "INFO [mxfp4.py:94] Using Triton backend\n", "m": MARLIN_WARNING}.items():
        obs = only_observation(ingest(tmp_path / key, {f"{key}/startup.log": _gpt_oss_log(line)}))
        deployment = observed_deployment(resolved.spec, settings_of(obs | {"engine_version": "0.11.0"}))
        est = estimate(resolved.spec, deployment, gpu=find_gpu_sku("H100"), checkpoint_bytes=resolved.checkpoint_bytes)
        weights[key] = est.weights_bytes_per_gpu / 2**30
    assert 1.4 < weights["m"] - weights["t"] < 2.0


def test_custom_all_reduce_flag_and_p2p_warning_reach_the_prediction(tmp_path: Path) -> None:
    """--disable-custom-all-reduce and vLLM's "lacks GPU P2P capability" warning (a public 0.4.2 CI log's
    wording) both mean NCCL's all-reduce in the graphs: the TP 2 estimate charges NCCL's per-graph memory."""
    flag = ("$ vllm serve Qwen/Qwen3-14B --tensor-parallel-size 2 --disable-custom-all-reduce\n"
            "INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 13.99 GiB and 9.9 seconds\n")  # fmt: skip
    warning = ("$ vllm serve Qwen/Qwen3-14B --tensor-parallel-size 2\n"
               "(Worker pid=3040) WARNING 05-13 08:48:35 custom_all_reduce.py:166] Custom allreduce is disabled because "
               "your platform lacks GPU P2P capability or P2P test failed. To silence this warning, specify "
               "disable_custom_all_reduce=True explicitly.\n"
               "INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 13.99 GiB and 9.9 seconds\n")  # fmt: skip
    flagged = only_observation(ingest(tmp_path / "f", {"f/startup.log": flag}))
    warned = only_observation(ingest(tmp_path / "w", {"w/startup.log": warning}))
    assert flagged["disable_custom_all_reduce"] is True and flagged.get("gpu_peer_access") is None
    assert warned["gpu_peer_access"] is False and warned.get("disable_custom_all_reduce") is None
    resolved = load_model("Qwen/Qwen3-14B")
    graphs = {}
    for key, obs in {"flag": flagged, "warning": warned, "plain": {**warned, "gpu_peer_access": None}}.items():
        deployment = observed_deployment(resolved.spec, settings_of(obs | {"engine_version": "0.28.0"}))
        est = estimate(resolved.spec, deployment, gpu=find_gpu_sku("H100"), checkpoint_bytes=resolved.checkpoint_bytes)
        graphs[key] = est.cuda_graph_bytes_per_gpu
    # H100 SXM pairs are on NVLink: custom all-reduce runs unless the log turns it off
    assert graphs["flag"] == graphs["warning"] > graphs["plain"]
