"""Explicit KV budgets and several models on one GPU (issue 23 item 6).

Oracles, none of them capplan's output:
- hand derivations from the checkpoints' config.json (in the bundled catalog) and the engines' source, each
  written out in the test's docstring;
- vLLM 0.33.0's own `v1/worker/utils.request_memory` on a simulated device (the oracle venv, on CPU:
  tools/engine_oracle/vllm_memory_oracle.py): the start check `init_device` runs whether or not
  --kv-cache-memory-bytes is given, so a packed engine needs a utilization that passes it.
"""

from __future__ import annotations

import json
import math
from itertools import product
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from capacity.engines import PoolRequest
from capacity.engines import sglang as sg
from capacity.engines.kinds import Engine
from capacity.engines.registry import engine_profile
from capacity.estimate import estimate
from capacity.features.kv_budget import BudgetKnob, budget_knob, token_capped_pool
from capacity.packing import PackMember, pack
from capacity.spec import DeploymentSpec, SpecError
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app
from tests.test_engine_sglang import _oracle as sglang_oracle
from tests.test_other_process_memory import run_vllm_memory_oracle
from tests.test_telemetry_support import gib, ingest, only_observation
from tools.memory_holdout import FEATURE_LOGS_DIR, load_cases

GIB = 1 << 30
SGLANG = engine_profile(Engine.SGLANG)
L1B, L3B, QWEN = "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"

# Llama-3.2-1B config.json: vocab 128,256, hidden 2,048, intermediate 8,192, 16 layers, 32 heads, 8 KV heads,
# head_dim 64, tied embeddings, bf16. KV per token = 2 (K, V) x 16 layers x 8 heads x 64 x 2 B = 32,768 B.
# Parameters: embedding 128,256 x 2,048 = 262,668,288; a layer: q 2,048^2 + k, v 2 x 2,048 x 512 + o 2,048^2
# + MLP 3 x 2,048 x 8,192 + 2 norms x 2,048 = 60,821,504; x 16 = 973,144,064; + final norm 2,048
# = 1,235,814,400 params x 2 B = 2,471,628,800 B.
L1B_KV_PER_TOKEN, L1B_WEIGHTS = 2 * 16 * 8 * 64 * 2, 1_235_814_400 * 2
# Llama-3.2-3B: hidden 3,072, intermediate 8,192, 28 layers, 24 heads, 8 KV heads, head_dim 128, tied.
# KV per token = 2 x 28 x 8 x 128 x 2 B = 114,688 B. Parameters: embedding 128,256 x 3,072 = 394,002,432; a
# layer: 3,072^2 + 2 x 3,072 x 1,024 + 3,072^2 + 3 x 3,072 x 8,192 + 2 x 3,072 = 100,669,440; x 28
# = 2,818,744,320; + 3,072 = 3,212,749,824 params x 2 B = 6,425,499,648 B.
L3B_KV_PER_TOKEN, L3B_WEIGHTS = 2 * 28 * 8 * 128 * 2, 3_212_749_824 * 2


def _member(repo: str, concurrency: int, context: int, engine: str = "vllm") -> PackMember:
    resolved = load_model(repo)
    return PackMember(
        repo, resolved.spec, DeploymentSpec(engine=engine), context, concurrency, resolved.checkpoint_bytes
    )


def test_two_small_models_share_one_l4_with_hand_derived_budgets() -> None:
    """Llama-3.2-3B then Llama-3.2-1B, each 16 sequences of 4,096 tokens, vLLM 0.33 on one L4.

    KV: 16 x 4,096 = 65,536 tokens; vLLM's blocks of 16 tokens: 256 per sequence, 4,096 blocks in all, so the
    smallest budget is exactly 65,536 x the bytes per token: 3B 65,536 x 114,688 = 7,516,192,768 B (7 GiB),
    1B 65,536 x 32,768 = 2,147,483,648 B (2 GiB). Weights as derived above. Each holds weights + overhead +
    KV; the second starts with the first's memory in use, with a utilization of its own share (thousandths,
    rounded up) so that 0.33's start check (free >= ceil(total x utilization)) passes."""
    l4 = find_gpu_sku("l4-24gb")
    packing = pack([_member(L3B, 16, 4096), _member(L1B, 16, 4096)], l4)
    assert packing.fits, packing.reason
    first, second = packing.members
    assert (first.kv_budget_bytes, second.kv_budget_bytes) == (65_536 * L3B_KV_PER_TOKEN, 65_536 * L1B_KV_PER_TOKEN)
    assert (first.kv_budget_bytes, second.kv_budget_bytes) == (7 << 30, 2 << 30)
    assert (first.estimate.weights_bytes_per_gpu, second.estimate.weights_bytes_per_gpu) == (L3B_WEIGHTS, L1B_WEIGHTS)
    for m in packing.members:
        assert m.knob is BudgetKnob.BYTES and m.kv_cache_memory_bytes == m.kv_budget_bytes
        assert (
            m.footprint_bytes
            == m.estimate.weights_bytes_per_gpu + m.estimate.overhead_bytes_per_gpu + m.kv_budget_bytes
        )
        assert m.gpu_memory_utilization == math.ceil(m.footprint_bytes * 1000 / l4.memory_total_bytes) / 1000
        assert m.estimate.b_max >= 16 and m.estimate.starts
    assert second.others_at_start_bytes == first.footprint_bytes
    free_at_second = l4.memory_total_bytes - first.footprint_bytes
    assert free_at_second >= math.ceil(l4.memory_total_bytes * second.gpu_memory_utilization)
    assert packing.used_bytes <= l4.memory_total_bytes


def test_a_member_whose_max_model_len_exceeds_its_context_gets_the_pool_that_starts() -> None:
    """3B serving one 4,096-token sequence with --max-model-len 32,768: vLLM 0.33 starts only if one request of
    32,768 tokens fits the pool beside the null block it holds back (kv_cache_planning's start check): 2,048 + 1
    blocks of 16 tokens x 114,688 B = 3,759,931,392 B, more than the 4,096 x 114,688 = 469,762,048 B the
    sequence itself needs."""
    resolved = load_model(L3B)
    long_member = PackMember(L3B, resolved.spec, DeploymentSpec(), 4096, 1, resolved.checkpoint_bytes, 32768)
    packing = pack([long_member, _member(L1B, 16, 4096)], find_gpu_sku("l4-24gb"))
    assert packing.fits, packing.reason
    assert packing.members[0].kv_budget_bytes == (2048 + 1) * 16 * L3B_KV_PER_TOKEN == 3_759_931_392
    assert packing.members[0].estimate.max_model_len == 32768 and packing.members[0].estimate.starts


def test_a_pair_that_does_not_fit_together_is_not_packed() -> None:
    """Each fits an L4 alone, not both: 3B at 12 x 8,192 = 98,304 tokens is 98,304 x 114,688 = 11.27e9 B of KV
    + 6.43e9 of weights (17.7e9 before overhead); 1B at the same is 98,304 x 32,768 = 3.22e9 + 2.47e9 = 5.69e9:
    23.4e9 B before either engine's overhead, and the L4 has 23,616,028,672 B. A 3B needing 64 x 8,192 tokens
    (60.1e9 B of KV) fits no L4 at all."""
    l4 = find_gpu_sku("l4-24gb")
    for repo in (L3B, L1B):
        alone = estimate(load_model(repo).spec, DeploymentSpec(max_model_len=8192), gpu=l4, context_tokens=8192)
        assert alone.fits and alone.b_max >= 12
    together = pack([_member(L3B, 12, 8192), _member(L1B, 12, 8192)], l4)
    assert not together.fits and together.reason.startswith(L1B)
    huge = pack([_member(L3B, 64, 8192), _member(L1B, 1, 512)], l4)
    assert not huge.fits and "do not fit even a whole l4-24gb" in huge.reason


def test_sglang_members_take_fractions_of_what_the_earlier_engine_left() -> None:
    """SGLang has no byte budget: each member gets a mem_fraction_static, and its budget is
    (free at start) x fraction - weights - overhead (`_profile_available_bytes`); the KV it needs is the same
    tokens x bytes as for vLLM, and the pool it gets holds at least that."""
    h100 = find_gpu_sku("h100-sxm-80gb")
    packing = pack([_member(L3B, 16, 4096, "sglang"), _member(L1B, 16, 4096, "sglang")], h100)
    assert packing.fits, packing.reason
    for m, per_token in zip(packing.members, (L3B_KV_PER_TOKEN, L1B_KV_PER_TOKEN), strict=True):
        assert m.knob is BudgetKnob.FRACTION and m.kv_cache_memory_bytes is None
        assert m.kv_budget_bytes >= 65_536 * per_token
        assert m.estimate.kv_cache_tokens >= 65_536
    assert packing.members[1].others_at_start_bytes == packing.members[0].footprint_bytes


def test_budget_knob_by_engine_and_release() -> None:
    assert budget_knob(Engine.VLLM, None) is BudgetKnob.BYTES
    assert budget_knob(Engine.VLLM, "0.33.0") is BudgetKnob.BYTES
    assert budget_knob(Engine.VLLM, "0.9.2") is BudgetKnob.FRACTION
    assert budget_knob(Engine.SGLANG, None) is BudgetKnob.FRACTION
    assert budget_knob(Engine.TRTLLM, None) is BudgetKnob.FRACTION


@pytest.mark.engine_oracle
def test_vllm_033_start_check_runs_with_a_byte_budget() -> None:
    """vLLM 0.33's `request_memory` (called by `init_device` before any KV sizing, with or without
    kv_cache_memory_bytes) against the packed second engine: it starts with the packed utilization, and
    refuses with the default 0.92 (what --kv-cache-memory-bytes alone would leave)."""
    l4 = find_gpu_sku("l4-24gb")
    packing = pack([_member(L3B, 16, 4096), _member(L1B, 16, 4096)], l4)
    first, second = packing.members
    cases = [
        {
            "id": str(util),
            "total_bytes": l4.memory_total_bytes,
            "utilization": util,
            "other_bytes": first.footprint_bytes,
            "context_bytes": 0,
            "weights_bytes": L1B_WEIGHTS,
            "activation_bytes": second.estimate.activation_peak_bytes_per_gpu,
            "non_torch_bytes": second.estimate.non_torch_bytes_per_gpu,
            "integrated": False,
            "host_available_bytes": 0,
        }
        for util in (second.gpu_memory_utilization, 0.92)
    ]
    answer = run_vllm_memory_oracle(cases)
    packed, default = answer[str(second.gpu_memory_utilization)], answer["0.92"]
    assert "error" not in packed
    assert packed["requested_bytes"] == math.ceil(l4.memory_total_bytes * second.gpu_memory_utilization)
    assert "less than desired GPU memory utilization" in default["error"]
    # the estimate says the same of the second engine given the bytes alone
    alone = estimate(
        second.member.model,
        DeploymentSpec(
            max_model_len=4096, kv_cache_memory_bytes=second.kv_budget_bytes, other_process_bytes=first.footprint_bytes
        ),
        gpu=l4,
        context_tokens=4096,
        concurrency=16,
    )
    assert alone.start_memory_refused and not alone.fits


def test_sglang_max_total_tokens_caps_the_token_pool() -> None:
    """SGLang 0.5.23 `_apply_token_constraints`: min(profiled, --max-total-tokens), page-aligned down; the
    fraction is unchanged. Qwen2.5-0.5B (24 layers, 2 KV heads, head_dim 64, bf16): a token is
    2 x 24 x 2 x 64 x 2 = 12,288 B, so 50,000 tokens are far below what an L4's fraction holds."""
    qwen = load_model(QWEN)
    l4 = find_gpu_sku("l4-24gb")
    base = DeploymentSpec(engine="sglang", max_model_len=4096)
    free = estimate(qwen.spec, base, gpu=l4)
    capped = estimate(qwen.spec, DeploymentSpec(engine="sglang", max_model_len=4096, max_total_tokens=50_000), gpu=l4)
    assert free.kv_budget_bytes_per_gpu // 12_288 > 50_000
    assert capped.kv_cache_tokens == 50_000
    assert capped.kv_budget_bytes_per_gpu == free.kv_budget_bytes_per_gpu
    above = estimate(qwen.spec, DeploymentSpec(engine="sglang", max_model_len=4096, max_total_tokens=10**9), gpu=l4)
    assert above.kv_cache_tokens == free.kv_cache_tokens
    with pytest.raises(SpecError, match="SGLang's"):
        estimate(qwen.spec, DeploymentSpec(max_model_len=4096, max_total_tokens=50_000), gpu=l4)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_cli_max_total_tokens_from_a_pasted_sglang_command_is_sized() -> None:
    out = _cli(
        "estimate",
        "--gpu",
        "L4",
        "--json",
        "--from-command",
        f"python -m sglang.launch_server --model-path {QWEN} --context-length 4096 --max-total-tokens 50000",
    )
    assert out.exit_code == 0, out.output
    contract = json.loads(out.stdout)
    assert contract["kv_cache_tokens"] == 50_000 and contract["modelled"] is True
    bad = _cli("estimate", QWEN, "--gpu", "L4", "--engine", "sglang", "--max-total-tokens", "0")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1
    other = _cli("estimate", QWEN, "--gpu", "L4", "--max-total-tokens", "5000")
    assert other.exit_code == 2 and "SGLang's" in other.stderr and other.stderr.count("\n") == 1


def test_procure_packs_two_workloads_on_one_gpu_cheaper_than_apart(tmp_path: Path) -> None:
    """Two workloads that each get an L4 of their own (the plan's choice), 14 sequences at 90 % headroom, so
    B_max 16 (floor(16 x 0.9) = 14): packed on one L4 at $0.805/h instead of two at $1.61/h, with the hand
    budgets above on the engines' command lines, one port each; the pair that does not fit stays apart."""
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(
        f"""schema_version: 1
defaults: {{headroom: 0.9, engine: vllm}}
procurement: {{whole_nodes: false, gpus: [l4-24gb]}}
workloads:
  - {{name: chat, models: [{L1B}], target_concurrency: 14, context_tokens: 4096}}
  - {{name: rag, models: [{L3B}], target_concurrency: 14, context_tokens: 4096}}
""",
        encoding="utf-8",
    )
    out = _cli("procure", "--workloads", str(workloads), "--warehouse", str(tmp_path / "none.duckdb"), "--json")
    assert out.exit_code == 0, out.output
    plan = json.loads(out.stdout)
    assert plan["gpus"] == 2 and [a["gpus_total"] for a in plan["assignments"]] == [1, 1]
    rows = plan["packed"]
    assert [(r["start_order"], r["model"]) for r in rows] == [(1, L3B), (2, L1B)]
    assert {r["pack_usd_per_hour"] for r in rows} == {0.805}
    assert sum(r["usd_per_hour_apart"] for r in rows) == pytest.approx(2 * 0.805)
    assert [r["kv_budget_bytes"] for r in rows] == [7 << 30, 2 << 30]
    assert "--kv-cache-memory-bytes 7516192768" in rows[0]["command"] and "--port 8000" in rows[0]["command"]
    assert "--kv-cache-memory-bytes 2147483648" in rows[1]["command"] and "--port 8001" in rows[1]["command"]
    assert f"--gpu-memory-utilization {rows[1]['gpu_memory_utilization']:g}" in rows[1]["command"]
    text = _cli("procure", "--workloads", str(workloads), "--warehouse", str(tmp_path / "none.duckdb"))
    assert "pack 1: 1 x l4-24gb at $0.81/h instead of $1.61/h apart" in text.stdout

    workloads.write_text(workloads.read_text().replace("4096}", "8192}").replace("14,", "11,"), encoding="utf-8")
    apart = json.loads(
        _cli("procure", "--workloads", str(workloads), "--warehouse", str(tmp_path / "none.duckdb"), "--json").stdout
    )
    assert apart["gpus"] == 2 and apart["packed"] == []


def test_capplan_pack_prints_the_split_and_refuses_what_does_not_fit() -> None:
    """The same pair as above through `capplan pack`: the hand budgets, one port each; the pair that does not fit
    exits 1 with the second engine's start refusal; a malformed member is a one-line usage error."""
    out = _cli("pack", "--gpu", "L4", "--model", f"{L3B}=16x4096", "--model", f"{L1B}=16x4096", "--json")
    assert out.exit_code == 0, out.output
    answer = json.loads(out.stdout)
    assert answer["fits"] and [m["kv_budget_bytes"] for m in answer["members"]] == [7 << 30, 2 << 30]
    assert [m["kv_cache_tokens"] for m in answer["members"]] == [65_536, 65_536]
    assert "--port 8001" in answer["members"][1]["command"]
    apart = _cli("pack", "--gpu", "L4", "--model", f"{L3B}=12x8192", "--model", f"{L1B}=12x8192")
    assert apart.exit_code == 1 and "DOES NOT FIT" in apart.stdout and "vLLM refuses to start" in apart.stdout
    for bad in (["--model", f"{L3B}=12"], ["--model", f"{L3B}=0x4096", "--model", f"{L1B}=1x512"]):
        usage = _cli("pack", "--gpu", "L4", *bad)
        assert usage.exit_code == 2 and usage.stderr.count("\n") == 1, usage.output


@pytest.mark.engine_oracle
def test_sglang_max_total_tokens_against_its_own_configurators() -> None:
    """capplan's capped pools against SGLang 0.5.23's `KVCacheConfigurator.config_from_budget` (its
    `_apply_token_constraints` with --max-total-tokens, then `calculate_pool_sizes_from_max_tokens` of the default
    and hybrid SWA configurators; tests/test_engine_sglang.py's harness, with a "cap"), caps below and above the
    profiled pool, pages 1 and 64."""
    cases: list[dict[str, Any]] = []
    mine: list[object] = []
    for model_id in ("meta-llama/Llama-3.1-8B-Instruct", "google/gemma-3-27b-it", "openai/gpt-oss-20b"):
        spec = load_model(model_id).spec
        c = sg.cells(spec, 2, 4, 1, 1)
        for page, budget, cap in product((1, 64), (10**9 + 7, 13 * GIB + 12_345), (1_000, 50_001, 123_457, 10**8)):
            pool = SGLANG.stage_pools(PoolRequest(spec, budget, 2, 4, 2, 1, 1, page, 8192, 8192))[0]
            capped, _note = token_capped_pool(pool, Engine.SGLANG, cap)
            if c.hybrid:
                cases.append(
                    {
                        "kind": "swa",
                        "full_per_token": c.full_cell // c.full_layers,
                        "swa_per_token": c.swa_cell // c.swa_layers,
                        "full_layers": c.full_layers,
                        "swa_layers": c.swa_layers,
                        "window": c.window if c.window != 8192 else None,
                        "page": page,
                        "budget": budget,
                        "cap": cap,
                    }
                )
                mine.append([capped.capacity_units, capped.swa_capacity_units or 0])
            else:
                cases.append({"kind": "default", "cell": c.full_cell, "page": page, "budget": budget, "cap": cap})
                mine.append(capped.capacity_units * page)
    theirs = sglang_oracle(cases)
    assert [(case, a) for case, a, b in zip(cases, mine, theirs, strict=True) if a != b] == []


def test_a_vllm_log_with_a_given_budget_reads_as_its_kv_memory(tmp_path: Path) -> None:
    """The public GB10 log of evaluation/data/feature_logs/kv_budget.yaml, lines verbatim: with
    --kv-cache-memory-bytes vLLM prints no "Available KV cache memory" line, only the budget it reserved."""
    case = next(c for c in load_cases(FEATURE_LOGS_DIR / "kv_budget.yaml") if c.catalog_model == "Qwen/Qwen3.8-27B")
    sidecar = "model: Qwen/Qwen3.8-27B\ngpu: NVIDIA GB10\n"
    obs = only_observation(ingest(tmp_path, {"gb10/startup.log": case.quote + "\n", "gb10/deployment.yaml": sidecar}))
    assert obs["kv_cache_memory_bytes"] == gib(37.11) and obs["kv_cache_tokens"] == 1_209_295
