"""DP attention, expert parallel and decode context parallel (issue 23 item 5): per-rank weights, per-rank KV
and the printed tokens of one DP rank, against vLLM 0.33's own code run on the CPU
(tools/engine_oracle/vllm_parallel_layout.py) and hand derivations from DeepSeek-V3's config.json and the
engines' source (SGLang 0.5.23's attention-DP split, its per-rank share of --max-running-requests)."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from capacity.calibration import observed_deployment
from capacity.engines.command_flags import ENGINE_FLAGS
from capacity.engines.command_line import read_command
from capacity.engines.kinds import Engine
from capacity.estimate import Estimate, estimate
from capacity.features.parallel_layout import expert_parallel_width
from capacity.performance import DEFAULT_EFFICIENCY, efficiency_for, perf_inputs, performance
from capacity.placement import place
from capacity.planning_types import WorkloadProfile
from capacity.serving import Lengths, Load, simulate
from capacity.spec import DeploymentSpec, SpecError
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app
from recommendations.deploy import ServingPlan, engine_command
from recommendations.serving_plan import SIMULATED_REQUESTS, PlaceQuery, ServedModel, place_model
from telemetry.predictions import settings_of
from tests.conftest import SGLANG_CPU_PREAMBLE, require_oracle_venv, run_in_oracle_venv, run_sglang_in_oracle_venv
from tests.test_telemetry_support import ingest, only_observation

ORACLE = Path(__file__).resolve().parents[1] / "tools" / "engine_oracle" / "vllm_parallel_layout.py"
SGLANG_ORACLE = ORACLE.with_name("sglang_parallel_layout.py")
MODEL = "deepseek-ai/DeepSeek-V3"

# DeepSeek-V3's config.json: hidden 7168, 61 layers (3 dense, 58 MoE), 256 routed experts of intermediate 2048,
# MLA with q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, 128 heads of qk_nope 128 / v 128, vocab 129280
HIDDEN, LAYERS, MOE_LAYERS, EXPERTS, MOE_INTER, VOCAB = 7168, 61, 58, 256, 2048, 129_280
KV_LORA, ROPE = 512, 64
# vLLM's MLAAttentionSpec: one head of kv_lora_rank + qk_rope_head_dim values per token and layer, bf16 (`auto`)
MLA_BYTES_PER_TOKEN = (KV_LORA + ROPE) * 2 * LAYERS  # 70,272
ROUTED_EXPERT_PARAMS = MOE_LAYERS * EXPERTS * 3 * HIDDEN * MOE_INTER  # gate, up, down of every routed expert
# the attention projections TP splits, per layer: q_b, kv_b (column-parallel) and o (row-parallel); q_a and kv_a
# (with MQA rope) and the two latent norms are whole on every rank already (SGLang's ReplicatedLinear)
SPLIT_ATTENTION_PARAMS = LAYERS * (1536 * 128 * (128 + ROPE) + KV_LORA * 128 * 256 + 128 * 128 * HIDDEN)
BUDGET_BYTES = 32_000_000_000  # one DP rank's KV budget, given (vLLM --kv-cache-memory-bytes)


@cache
def _model() -> Any:
    return load_model(MODEL).spec


def _estimate(**deployment: Any) -> Estimate:
    return estimate(_model(), DeploymentSpec(**deployment), gpu=find_gpu_sku("H200"))


def _oracle(ep_size: int, dcp: int, max_model_len: int, redundant_experts: int = 0) -> dict[str, Any]:
    require_oracle_venv()
    case = {
        "num_experts": EXPERTS,
        "ep_size": ep_size,
        "redundant_experts": redundant_experts,
        "block_size": 64,
        "kv_lora_rank": KV_LORA,
        "qk_rope_head_dim": ROPE,
        "num_layers": LAYERS,
        "dtype": "bfloat16",
        "dcp": dcp,
        "max_model_len": max_model_len,
        "available_memory": BUDGET_BYTES,
    }
    done = run_in_oracle_venv(ORACLE, case, timeout_s=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reply: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return reply


@pytest.mark.engine_oracle
def test_deepseek_v3_dp8_ep8_per_rank_tokens_match_vllms_own_rule() -> None:
    """vLLM `-dp 8 --enable-expert-parallel` on 8 x H200 (attention TP 1): each rank's pool holds the whole MLA
    latent of its own requests, and its printed 'GPU KV cache size' is vLLM's own for that budget."""
    oracle = _oracle(ep_size=8, dcp=1, max_model_len=32_768)
    est = _estimate(tp=1, dp=8, ep=8, block_size=64, max_model_len=32_768, kv_cache_memory_bytes=BUDGET_BYTES)
    assert est.kv_bytes_per_token_per_gpu == MLA_BYTES_PER_TOKEN == 70_272
    assert est.num_blocks == oracle["num_blocks"] == BUDGET_BYTES // (64 * MLA_BYTES_PER_TOKEN)
    assert est.kv_cache_tokens == oracle["kv_cache_tokens"]
    assert est.not_modelled is None
    assert any(f"8 x {est.b_max:,} = {8 * est.b_max:,} sequences" in note for note in est.notes)


@pytest.mark.engine_oracle
def test_deepseek_v3_dp8_ep8_per_rank_tokens_by_hand() -> None:
    """The same layout by hand from vLLM's rule (kv_cache_utils: blocks = budget // (block_size x page bytes per
    token), tokens = blocks x block_size, per DP rank; the MLA latent whole on the rank); the group holds 8 ranks'
    sequences. Runs without the oracle venv (the oracle test above runs vLLM's own code in the slow group)."""
    est = _estimate(tp=1, dp=8, ep=8, block_size=64, max_model_len=32_768, kv_cache_memory_bytes=BUDGET_BYTES)
    blocks = BUDGET_BYTES // (64 * MLA_BYTES_PER_TOKEN)  # 32e9 // 4,497,408 = 7,115
    assert (est.kv_bytes_per_token_per_gpu, est.num_blocks, est.kv_cache_tokens) == (70_272, blocks, blocks * 64)
    assert est.b_max == blocks * 64 // 32_768  # 13 sequences of 32,768 tokens a rank
    assert any(f"8 x {est.b_max:,} = {8 * est.b_max:,} sequences" in note for note in est.notes)


@pytest.mark.engine_oracle
def test_deepseek_v3_dp8_ep8_weights_hold_an_eighth_of_the_experts() -> None:
    """Experts split whole over EP = tp x dp = 8 (vLLM's determine_expert_map gives each rank 32 of 256); the
    attention, dense MLP, embedding and head stay whole on every rank (TP 1): the rank holds the TP 1 weights
    less 7/8 of the routed experts (fp8: one byte a parameter)."""
    local = max(_oracle(ep_size=8, dcp=1, max_model_len=4096)["local_experts"])
    whole = _estimate(tp=1, max_model_len=4096)
    per_rank = _estimate(tp=1, dp=8, ep=8, max_model_len=4096)
    removed_bytes = ROUTED_EXPERT_PARAMS * (EXPERTS - local) // EXPERTS
    assert abs((whole.weights_bytes_per_gpu - per_rank.weights_bytes_per_gpu) - removed_bytes) <= 1
    # without --enable-expert-parallel vLLM still shards the MoE layers over all dp x tp GPUs (tensor parallel)
    assert _estimate(tp=1, dp=8, max_model_len=4096).weights_bytes_per_gpu == per_rank.weights_bytes_per_gpu


@pytest.mark.engine_oracle
def test_eplb_redundant_experts_add_whole_experts_per_rank() -> None:
    """`--eplb-config '{"num_redundant_experts": 32}'`: 288 physical experts over EP 8, 36 a rank by vLLM's own
    expert map: 4 more whole experts (fp8, 58 MoE layers) than without, read from the pasted command."""
    local = max(_oracle(ep_size=8, dcp=1, max_model_len=4096, redundant_experts=32)["local_experts"])
    read = read_command("vllm serve x -dp 8 --enable-expert-parallel --eplb-config.num_redundant_experts 32").options
    assert read["redundant_experts"] == 32
    without = _estimate(tp=1, dp=8, ep=8, max_model_len=4096)
    with_eplb = _estimate(tp=1, dp=8, ep=8, max_model_len=4096, redundant_experts=32)
    added_bytes = MOE_LAYERS * (local - EXPERTS // 8) * 3 * HIDDEN * MOE_INTER
    assert local == 36
    assert abs(with_eplb.weights_bytes_per_gpu - without.weights_bytes_per_gpu - added_bytes) <= 1


@pytest.mark.engine_oracle
def test_decode_context_parallel_multiplies_the_printed_tokens_as_vllm_does() -> None:
    """`-tp 8 -dcp 4`: each request's KV is split over 4 ranks, a block spans 64 x 4 tokens of a request."""
    oracle = _oracle(ep_size=8, dcp=4, max_model_len=32_768)
    est = _estimate(tp=8, dcp=4, block_size=64, max_model_len=32_768, kv_cache_memory_bytes=BUDGET_BYTES)
    assert est.num_blocks == oracle["num_blocks"]
    assert est.kv_cache_tokens == oracle["kv_cache_tokens"] == 4 * oracle["num_blocks"] * 64
    assert est.max_concurrency == pytest.approx(oracle["max_concurrency"], abs=1e-4)


@pytest.mark.engine_oracle
def test_a_gqa_moe_dp4_tp2_rank_holds_its_tp_share_of_kv_heads_and_an_eighth_of_the_experts() -> None:
    """Qwen3-235B-A22B (94 layers, 4 KV heads of 128, 128 experts of 3 x 4096 x 1536, bf16) at vLLM `-tp 2 -dp 4
    --enable-expert-parallel`: each rank's pool holds 2 KV heads (vLLM's get_num_kv_heads at TP 2) and its printed
    tokens are vLLM's own for that budget; the experts split 16 a rank over EP 8 instead of in halves at TP 2."""
    require_oracle_venv()
    case = {
        "num_experts": 128,
        "ep_size": 8,
        "block_size": 16,
        "total_num_kv_heads": 4,
        "head_size": 128,
        "tp": 2,
        "num_layers": 94,
        "dtype": "bfloat16",
        "dcp": 1,
        "max_model_len": 8192,
        "available_memory": BUDGET_BYTES,
    }
    done = run_in_oracle_venv(ORACLE, case, timeout_s=300)
    assert done.returncode == 0, done.stderr[-2000:]
    oracle = json.loads(done.stdout.strip().splitlines()[-1])
    model = load_model("Qwen/Qwen3-235B-A22B").spec
    gpu = find_gpu_sku("H200")

    def sized(**layout: int) -> Estimate:
        deployment = DeploymentSpec(
            tp=2, block_size=16, max_model_len=8192, kv_cache_memory_bytes=BUDGET_BYTES, **layout
        )
        return estimate(model, deployment, gpu=gpu)

    dp4 = sized(dp=4, ep=8)
    assert dp4.kv_bytes_per_token_per_gpu == 94 * 2 * 2 * 128 * 2
    assert (dp4.num_blocks, dp4.kv_cache_tokens) == (oracle["num_blocks"], oracle["kv_cache_tokens"])
    expert_params = 94 * 128 * 3 * 4096 * 1536
    assert max(oracle["local_experts"]) == 16
    saved_bytes = expert_params * 2 * (1 / 2 - 16 / 128)
    assert sized().weights_bytes_per_gpu - dp4.weights_bytes_per_gpu == pytest.approx(saved_bytes, abs=2)


def test_sglang_dp_attention_splits_attention_and_the_embedding_within_the_attention_group() -> None:
    """SGLang `--tp 8 --enable-dp-attention --dp-size 8 --ep-size 8`: attention TP = 8 / 8 = 1
    (runtime_context.derive_attn_tp_size), so each rank holds the whole attention and embedding (sharded within
    the attention group) while the head, dense MLP and experts stay split over all 8; the MLA latent is whole
    per rank, as at TP 8; --max-running-requests is the group's, a rank takes its 8th."""
    plain = _estimate(engine="sglang", tp=8, max_model_len=4096)
    dp = _estimate(engine="sglang", tp=8, dp=8, ep=8, max_model_len=4096, max_num_seqs=1024)
    added_bytes = (SPLIT_ATTENTION_PARAMS * 1 + VOCAB * HIDDEN * 2) * 7 / 8  # fp8 attention, bf16 embedding
    assert dp.weights_bytes_per_gpu - plain.weights_bytes_per_gpu == pytest.approx(added_bytes, rel=1e-6)
    assert dp.kv_bytes_per_token_per_gpu == plain.kv_bytes_per_token_per_gpu == MLA_BYTES_PER_TOKEN
    assert dp.max_num_seqs == 1024 // 8
    assert dp.not_modelled is None


@pytest.mark.engine_oracle
def test_sglang_dp_attention_matches_sglangs_own_attention_tp_and_running_cap() -> None:
    """SGLang's derive_attn_tp_size and KVCacheConfigurator.resolve_max_num_reqs, run on the CPU, against the
    layout capplan sizes for `--tp 8 --dp-size 8 --enable-dp-attention --max-running-requests 1024`."""
    require_oracle_venv()
    est = _estimate(engine="sglang", tp=8, dp=8, ep=8, max_model_len=4096, max_num_seqs=1024)
    case = {"tp": 8, "dp": 8, "max_running_requests": 1024, "token_capacity": est.kv_cache_tokens, "context_len": 4096}
    script = SGLANG_CPU_PREAMBLE + SGLANG_ORACLE.read_text(encoding="utf-8")
    done = run_sglang_in_oracle_venv(script, case, timeout_s=300)
    assert done.returncode == 0, done.stderr[-2000:]
    oracle = json.loads(done.stdout.strip().splitlines()[-1])
    assert est.layout is not None and est.layout.attention_tp == oracle["attn_tp_size"] == 1
    assert est.max_num_seqs == oracle["max_running_requests_per_rank"]


def test_sglang_attention_tp_splits_gqa_heads_over_tp_over_dp() -> None:
    """A GQA MoE (Qwen3-30B-A3B: 4 KV heads of 128, 48 layers) at --tp 4 --dp-size 2: attention TP 2, so each
    rank holds 2 KV heads, K and V, bf16."""
    model = load_model("Qwen/Qwen3-30B-A3B").spec
    est = estimate(model, DeploymentSpec(engine="sglang", tp=4, dp=2, max_model_len=4096), gpu=find_gpu_sku("H100"))
    assert est.kv_bytes_per_token_per_gpu == 48 * 2 * 2 * 128 * 2


def test_pasted_commands_read_the_layout() -> None:
    vllm = read_command("vllm serve deepseek-ai/DeepSeek-V3 -dp 8 --enable-expert-parallel -dcp 1")
    assert vllm.options == {"dp": 8, "enable_expert_parallel": True, "dcp": 1} and not vllm.unsized
    sglang = read_command(
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --enable-dp-attention "
        "--dp-size 8 --ep-size 8"
    )
    assert sglang.options == {"tp": 8, "enable_dp_attention": True, "dp": 8, "ep": 8} and not sglang.unsized
    replicas = read_command("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --tp 2 --dp-size 2")
    assert "dp" not in replicas.options and any("replicas" in note for note in replicas.notes)


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["estimate", *args])


def test_the_cli_sizes_the_layout_and_refuses_what_the_engines_refuse() -> None:
    out = _cli(
        "--gpu",
        "H200",
        "--max-model-len",
        "8192",
        "--json",
        "--from-command",
        "vllm serve deepseek-ai/DeepSeek-V3 -dp 8 --enable-expert-parallel",
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["modelled"] is True
    for args, words in (
        (["--dp", "0"], "--dp must be >= 1"),
        (["--dp", "8", "--ep", "4"], "tp x dp = 8"),
        (["--tp", "8", "--dcp", "3"], "divide TP"),
        (["--engine", "trtllm", "--dp", "8"], "extra_llm_api_options"),
        (["--engine", "sglang", "--tp", "8", "--ep", "3"], "must divide --tp 8"),
        (["--engine", "sglang", "--tp", "8", "--dcp", "2"], "not sized"),
        (["--dp", "8", "--redundant-experts", "16"], "need expert parallel"),
        (["--dp", "8", "--enable-expert-parallel", "--redundant-experts", "-1"], "redundant experts >= 0"),
    ):
        result = _cli(MODEL, "--gpu", "H200", *args)
        assert result.exit_code == 2, (args, result.output)
        assert words in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_expert_parallel_needs_experts() -> None:
    with pytest.raises(SpecError, match="without routed experts"):
        estimate(load_model("Qwen/Qwen3-8B").spec, DeploymentSpec(ep=2, tp=2), gpu=find_gpu_sku("H100"))


def test_the_all_to_all_is_in_the_step_cost() -> None:
    """DP 8 x EP 8, attention TP 1: no all-reduce; each of 58 MoE layers dispatches and combines every token's
    hidden state (7168 bf16 values) to its 8 experts, 7/8 of them on other ranks, over H200's NVLink (450 GB/s
    in the catalog), plus the collective latency each way."""
    gpu = find_gpu_sku("H200")
    batch = 32

    def comm_ms(**deployment: Any) -> float:
        est = _estimate(max_model_len=8192, **deployment)
        perf = performance(
            _model(),
            est,
            gpu,
            concurrency=batch,
            input_tokens=1000,
            output_tokens=1000,
            chunk_tokens=8192,
            eff=DEFAULT_EFFICIENCY,
        )
        return perf.decode_comm_ms

    assert gpu.interconnect_gbps is not None
    payload_bytes = batch * 8 * HIDDEN * 2 * 7 / 8
    link_s = payload_bytes / (gpu.interconnect_gbps * 1e9)
    by_hand_s = 2 * MOE_LAYERS * (link_s + DEFAULT_EFFICIENCY.allreduce_latency_s)
    assert comm_ms(tp=1, dp=8, ep=8) == pytest.approx(by_hand_s * 1e3, rel=1e-9)
    assert comm_ms(tp=1) == 0.0


def test_dp_layouts_are_placement_candidates_for_moe_models_only() -> None:
    """On one 8 x H200 node, vLLM's DP x EP layouts (tp 1/2/4 x dp 8/4/2, EP 8) join the TP candidates of an MoE
    model: a replica is the DP group (8 GPUs, dp x the per-rank B_max); a dense model gets none."""
    gpu = find_gpu_sku("H200")
    workload = WorkloadProfile("chat", (MODEL,), target_concurrency=256, context_tokens=8192, gpus=(gpu.id,))
    result = place(_model(), workload, [gpu], model_id=MODEL)
    dp8 = [o for o in result.options if o.dp == 8]
    assert [(o.tp, o.ep, o.gpus_per_replica) for o in dp8] == [(1, 8, 8)]
    deployment = DeploymentSpec(tp=1, dp=8, ep=8, max_model_len=8192)
    per_rank = estimate(_model(), deployment, gpu=gpu, context_tokens=8192)
    assert dp8[0].b_max == 8 * per_rank.b_max
    assert {(o.tp, o.dp) for o in result.options} >= {(8, 1), (1, 8), (2, 4), (4, 2)}
    dense = place(load_model("Qwen/Qwen3-8B").spec, workload, [gpu], model_id="Qwen/Qwen3-8B")
    assert dense.options and all(o.dp == 1 for o in dense.options)


@pytest.mark.parametrize("engine", [Engine.VLLM, Engine.SGLANG])
def test_a_dp_placement_deploys_with_the_engines_own_flags_and_reads_back(engine: Engine) -> None:
    """The cheapest DeepSeek-V3 placement on 8 x H200 at 256 sequences is a DP x EP layout; its server command uses
    only the engine's own flags and, read back as `capplan estimate --from-command` reads it, sizes the same
    per-rank pool: dp x B_max is the option's B_max, and the pod asks for the whole DP group's GPUs."""
    gpu = find_gpu_sku("H200")
    workload = WorkloadProfile(
        "chat", (MODEL,), target_concurrency=256, context_tokens=8192, gpus=(gpu.id,), engine=engine.value
    )
    best = place(_model(), workload, [gpu], model_id=MODEL).best
    assert best is not None and best.dp > 1
    plan = ServingPlan.from_option(best, workload)
    line = engine_command(plan)
    assert {a for a in line.args if a.startswith("--")} <= set(ENGINE_FLAGS[engine]["flags"])
    assert plan.gpus_per_replica == best.gpus_per_replica == gpu.gpus_per_node
    read = read_command(line.text).options
    dp = int(read["dp"])  # type: ignore[call-overload]
    ep = expert_parallel_width(engine, plan.tp, dp) if read.get("enable_expert_parallel") else int(read.get("ep", 1))  # type: ignore[call-overload]
    spec = DeploymentSpec(tp=int(read["tp"]), dp=dp, ep=ep, engine=engine.value, max_model_len=8192)  # type: ignore[call-overload]
    est = estimate(_model(), spec, gpu=gpu, context_tokens=8192)
    assert (dp, ep) == (best.dp, best.ep) and dp * est.b_max == best.b_max


# SGLang's `server_args=ServerArgs(...)` line as launch_server prints it for `--tp 8 --enable-dp-attention --dp-size 8
# --ep-size 8` (a fixture in that format: its KV line is illustrative, 500,000 tokens x 70,272 bytes, not measured)
DP_LOG = Path(__file__).parent / "fixtures" / "telemetry" / "logs" / "sglang_deepseek_v3_h200_dp8_ep8.log"
VLLM_DP_LOG = (
    "$ vllm serve deepseek-ai/DeepSeek-V3 -tp 1 --data-parallel-size 8 --enable-expert-parallel --max-model-len 4096\n"
    "INFO 10-14 08:03:41 [gpu_model_runner.py:2653] Model loading took 85.10 GiB and 99.9 seconds\n"
)


def _logged(tmp_path: Path, text: str) -> DeploymentSpec:
    obs = only_observation(ingest(tmp_path, {"d/startup.log": text}))
    return observed_deployment(_model(), settings_of(obs))


def test_a_logged_sglang_dp_attention_server_is_sized_per_rank(tmp_path: Path) -> None:
    """The log's dp_size / enable_dp_attention / ep_size become the deployment's layout: attention TP 8 / 8 = 1
    (SGLang derive_attn_tp_size), each rank's MLA latent whole, as `--dp 8 --ep 8` typed by hand."""
    d = _logged(tmp_path, DP_LOG.read_text(encoding="utf-8"))
    assert (d.engine, d.tp, d.dp, d.ep) == ("sglang", 8, 8, 8)
    est = estimate(_model(), replace(d, max_model_len=4096), gpu=find_gpu_sku("H200"))
    assert est.layout is not None and est.layout.attention_tp == 1
    assert est.kv_bytes_per_token_per_gpu == MLA_BYTES_PER_TOKEN


def test_a_logged_vllm_dp_ep_server_is_sized_per_rank(tmp_path: Path) -> None:
    """vLLM's --data-parallel-size 8 --enable-expert-parallel at -tp 1: EP = tp x dp = 8 ranks
    (FusedMoEParallelConfig.make), so each GPU holds 256 / 8 = 32 whole routed experts."""
    d = _logged(tmp_path, VLLM_DP_LOG)
    assert (d.tp, d.dp, d.ep) == (1, 8, 8)
    est = estimate(_model(), d, gpu=find_gpu_sku("H200"))
    assert est.layout is not None and est.layout.expert_share(EXPERTS) * EXPERTS == 32


def test_sglang_dp_attention_logged_without_its_size_takes_the_engines_default(tmp_path: Path) -> None:
    """ServerArgs.dp_size defaults to 1: a dump that omits it ran one attention group (no error, no per-rank
    split); --dp-size without --enable-dp-attention is whole replicas, each sized as dp 1."""
    line = DP_LOG.read_text(encoding="utf-8").replace("dp_size=8, ", "")
    assert _logged(tmp_path / "a", line).dp == 1
    replicas = DP_LOG.read_text(encoding="utf-8").replace("enable_dp_attention=True", "enable_dp_attention=False")
    assert _logged(tmp_path / "b", replicas).dp == 1


def test_at_a_request_rate_a_dp_group_is_simulated_as_dp_engines_sharing_the_stream() -> None:
    """A DP group of dp ranks at a replica rate R is dp engines, each with its own pool, batch share and step cost,
    taking R / dp of the requests: by hand, one rank's per-rank estimate (its B = the replica's planned B / dp)
    simulated alone with Poisson arrivals at R / dp gives the answer's simulated percentiles exactly, and the DP
    options are candidates at a rate (no longer refused as 'the simulation runs one engine')."""
    gpu = find_gpu_sku("H200")
    query = PlaceQuery(1024, 256, request_rate_per_s=40.0, tpot_ms=200.0, gpus=(gpu.id,), top=20)
    answer = place_model(ServedModel(_model(), MODEL), query, [gpu])
    assert not any("runs one engine" in why for _gpu, why in answer.infeasible)
    dp = [served for served in answer.options if served.option.dp > 1 and served.sim is not None]
    assert dp, (answer.infeasible, [(s.option.tp, s.option.dp) for s in answer.options])
    served = dp[0]
    o = served.option
    per_rank_seqs = o.planned_per_replica // o.dp  # vLLM's --max-num-seqs is each engine core's
    layout = {"tp": o.tp, "dp": o.dp, "ep": o.ep, "weight_dtype": o.weight_dtype, "kv_dtype": o.kv_dtype}
    deployment = DeploymentSpec(**layout, max_model_len=o.max_model_len, max_num_seqs=per_rank_seqs)
    rank = estimate(_model(), deployment, gpu=gpu, model_name=MODEL, context_tokens=o.context_tokens)
    assert rank.max_num_seqs == per_rank_seqs and rank.layout is not None and rank.layout.dp == o.dp
    rate_per_rank = query.request_rate_per_s / (served.replicas * o.dp)
    alone = simulate(
        rank,
        perf_inputs(_model(), rank, gpu, o.weight_dtype),
        Load.poisson(rate_per_rank, SIMULATED_REQUESTS, Lengths(1024, 256)),
        efficiency_for(rank.engine, gpu),
    )
    assert served.sim.ttft.p99_ms == alone.ttft.p99_ms and served.sim.tpot.p99_ms == alone.tpot.p99_ms


def test_the_json_answer_names_the_layout_and_the_dp_groups_b_max() -> None:
    """`--json` carries dp, ep, dcp and the attention TP (SGLang derive_attn_tp_size: tp / dp = 1 at --tp 8
    --dp-size 8), and b_max_dp_group = dp x the rank's b_max (every rank schedules its own sequences); a TP-only
    answer reads 1, 1, 1, tp and its own b_max."""
    args = ["--gpu", "H200", "--max-model-len", "8192", "--json", "--engine", "sglang", "--tp", "8"]
    dp = json.loads(_cli(MODEL, *args, "--dp", "8", "--ep", "8").output)
    assert (dp["dp"], dp["ep"], dp["dcp"], dp["attention_tp"]) == (8, 8, 1, 1)
    assert dp["b_max"] > 0 and dp["b_max_dp_group"] == 8 * dp["b_max"]
    tp = json.loads(_cli(MODEL, *args).output)
    assert (tp["dp"], tp["ep"], tp["dcp"], tp["attention_tp"], tp["b_max_dp_group"]) == (1, 1, 1, 8, tp["b_max"])
