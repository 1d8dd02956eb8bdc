"""Pipeline stages sized from their own memory (vLLM): capplan's per-stage budgets (each stage's weights, the
sampler's peak on the last stage only: `gpu_model_runner.profile_run`'s `if get_pp_group().is_last_rank`) handed
to vLLM 0.33's own `kv_cache_planning.get_kv_cache_configs` as each worker's available memory: the blocks vLLM
keeps (the fewest over the workers) are capplan's."""

from __future__ import annotations

import pytest

from capacity.spec import DeploymentSpec
from tests.conftest import require_oracle_venv
from tests.estimating import estimate_model
from tests.test_engine_oracle import (
    VLLM_VERSION,
    OracleCase,
    catalog_models,
    oracle_case_json,
    oracle_gpus,
    run_oracle,
)

pytestmark = pytest.mark.engine_oracle

CASES = [
    # 27 layers split 14 / 13 (vLLM's get_pp_indices: the remainder before the last stage), MLA, MoE
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "l4-24gb", 2, 4096),
    # 36 layers split 18 / 18: the stages differ only in what they hold (embedding; LM head and sampler)
    ("Qwen/Qwen3-8B", "l4-24gb", 1, 8192),
]


@pytest.mark.parametrize(("repo_id", "gpu_id", "tp", "max_model_len"), CASES)
def test_vllm_keeps_the_blocks_of_the_tightest_stage(repo_id: str, gpu_id: str, tp: int, max_model_len: int) -> None:
    require_oracle_venv()
    model = next(m for m in catalog_models() if m.repo_id == repo_id)
    gpu = next(g for g in oracle_gpus() if g.sku.id == gpu_id)
    deployment = DeploymentSpec(tp=tp, pp=2, engine="vllm", engine_version=VLLM_VERSION, max_model_len=max_model_len)
    est = estimate_model(model, deployment, gpu=gpu.sku, context_tokens=max_model_len)
    budgets = est.stage_kv_budget_bytes
    assert len(budgets) == 2 and budgets[0] > budgets[1]  # the last stage holds the sampler's peak
    assert est.kv_budget_bytes_per_gpu == budgets[est.pool.stage]
    case = OracleCase(f"{repo_id}|pp2", model, gpu, tp, "auto", max_model_len, est.max_num_batched_tokens, 0, {}, 2)
    own = {**oracle_case_json(case), "available_memory_bytes": list(budgets)}  # each worker's own
    shared = {**own, "id": "shared", "available_memory_bytes": [min(budgets)] * 2}  # one budget for all, as before
    replies = run_oracle({"cases": [own, shared], "batch_defaults": []})["cases"]
    assert replies[0]["num_blocks"] == est.num_blocks
    if repo_id.startswith("deepseek"):  # the longer first stage binds: its own larger budget holds more blocks
        assert replies[1]["num_blocks"] < est.num_blocks
