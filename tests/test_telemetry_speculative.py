"""Observed logs that ran speculative decoding carry the method, tokens and draft to the prediction (issue 23),
so the estimate sizes the draft instead of flagging it.

Oracles: a public vLLM log (noonghunna/club-3090#295, 2x RTX 3090, boot log of 06-01: its `non-default args`
line, verbatim, ends `'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}`); SGLang's own
`server_args=ServerArgs(...)` dump, whose field names are its ServerArgs dataclass's (speculative_algorithm,
speculative_draft_model_path, speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens); and
what each engine does with those settings (vLLM SpeculativeConfig: a `*_mtp` or `mtp` method runs the target's own
MTP layers; SGLang: the flags as given).
"""

from __future__ import annotations

import json
from pathlib import Path

from capacity.calibration import observed_deployment
from capacity.estimate import estimate
from capacity.features.speculative import SpecMethod, SpeculativeSpec
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from telemetry.predictions import settings_of
from tests.test_telemetry_support import ingest, only_observation

LOADED = "(EngineCore pid=120) INFO 06-01 09:21:40 [gpu_model_runner.py:2653] Model loading took 14.99 GiB and 9.9 s\n"
# club-3090#295's line, cut to the settings it shares with the catalog model below (the rest is chat templates
# and sampling defaults); the speculative_config entry is as printed
CLUB_3090_295 = (
    "(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model_tag': "
    "'deepseek-ai/DeepSeek-V3', 'model': 'deepseek-ai/DeepSeek-V3', 'tensor_parallel_size': 8, "
    "'max_model_len': 8192, 'max_num_seqs': 2, 'max_num_batched_tokens': 8192, 'enable_prefix_caching': True, "
    "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}\n"
)
SGLANG_EAGLE3 = (
    "[2025-09-02 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, "
    "mem_fraction_static=0.85, speculative_algorithm='EAGLE3', "
    "speculative_draft_model_path='jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B', speculative_num_steps=3, "
    "speculative_eagle_topk=1, speculative_num_draft_tokens=4, enable_lora=None)\n"
    "[2025-09-02 10:00:20 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB\n"
)


def test_vllm_non_default_args_carry_the_method_and_tokens(tmp_path: Path) -> None:
    obs = only_observation(ingest(tmp_path, {"d/startup.log": CLUB_3090_295 + LOADED}))
    assert "speculative" in obs["unmodelled_features"].split(",")
    assert json.loads(obs["speculative_config"]) == {"method": "mtp", "num_speculative_tokens": 3}
    deployment = observed_deployment(load_model("deepseek-ai/DeepSeek-V3").spec, settings_of(obs))
    assert deployment.speculative == SpeculativeSpec(SpecMethod.MTP, 3)


def test_an_mtp_log_is_sized_not_flagged(tmp_path: Path) -> None:
    """The stated MTP layer's weights and KV join the estimate; nothing is flagged for speculative decoding."""
    obs = only_observation(ingest(tmp_path, {"d/startup.log": CLUB_3090_295 + LOADED}))
    resolved = load_model("deepseek-ai/DeepSeek-V3")
    deployment = observed_deployment(resolved.spec, settings_of(obs | {"engine_version": "0.33.0"}))
    h200 = find_gpu_sku("H200")
    est = estimate(resolved.spec, deployment, gpu=h200, checkpoint_bytes=resolved.checkpoint_bytes)
    assert est.not_modelled is None or "speculative" not in est.not_modelled
    assert any("speculative decoding: mtp" in note for note in est.notes)


def test_sglang_server_args_carry_the_algorithm_draft_and_tree(tmp_path: Path) -> None:
    obs = only_observation(ingest(tmp_path, {"s/startup.log": SGLANG_EAGLE3}))
    assert obs["engine"] == "sglang" and obs["unmodelled_features"] == "speculative"
    llama = load_model("meta-llama/Llama-3.1-8B-Instruct").spec
    spec = observed_deployment(llama, settings_of(obs)).speculative
    draft = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
    assert spec == SpeculativeSpec(SpecMethod.EAGLE3, 3, draft, eagle_topk=1, num_draft_tokens=4)


def test_a_vllm_command_line_config_names_its_draft(tmp_path: Path) -> None:
    config = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}'
    log = f"$ vllm serve meta-llama/Llama-3.1-8B-Instruct --speculative-config '{config}'\n{LOADED}"
    obs = only_observation(ingest(tmp_path, {"c/startup.log": log}))
    spec = observed_deployment(load_model("meta-llama/Llama-3.1-8B-Instruct").spec, settings_of(obs)).speculative
    assert spec == SpeculativeSpec(SpecMethod.EAGLE3, 5, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")


def test_speculative_decoding_off_states_nothing(tmp_path: Path) -> None:
    off = SGLANG_EAGLE3.replace("speculative_algorithm='EAGLE3'", "speculative_algorithm=None")
    obs = only_observation(ingest(tmp_path, {"o/startup.log": off}))
    assert obs.get("speculative_config") is None and obs.get("unmodelled_features") is None
