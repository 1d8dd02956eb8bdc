"""Speculative decoding sized (issue 23 item 4): the draft's weights and KV layers, by hand from the engines'
source and against vLLM 0.33's own KV planner; the speed at an acceptance rate from its definition.

Oracles: hand derivations from vLLM 0.33 `v1/spec_decode/llm_base_proposer.py` (shared embedding / lm_head),
`model_executor/models/llama_eagle.py` (the EAGLE head's modules), `deepseek_mtp.py` (the MTP layer) and
SGLang 0.5.23 `model_executor/pool_configurator.py` (the draft's layers at the target's per-layer size);
vLLM's planner (`tools/engine_oracle/vllm_oracle.py`) on the target's layers plus the draft's, which is
what `GPUModelRunner.get_kv_cache_spec` hands it with a drafter loaded (the draft layers' specs differ only
in `is_draft`, excluded from equality, so they join the target's groups).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest

from capacity.engines.kinds import Engine
from capacity.estimate import estimate
from capacity.features.speculative import (
    SpecMethod,
    SpeculativeConfigError,
    SpeculativeSpec,
    accepted_tokens_per_step,
    from_sglang_flags,
    from_vllm_config,
)
from capacity.features.speculative_memory import draft_shape
from capacity.features.speculative_speed import at_acceptance, speculative_step_seconds
from capacity.hf_config import parse_config
from capacity.performance import efficiency_for, perf_inputs, performance, step_seconds
from capacity.placement import place
from capacity.planning_types import WorkloadProfile
from capacity.spec import DeploymentSpec, ModelSpec, SpecError
from models_registry.sources.gpu_catalog import find_gpu_sku
from recommendations.workloads import parse_workloads
from tests.conftest import ROOT, SGLANG_CPU_PREAMBLE, require_oracle_venv, run_in_oracle_venv, run_sglang_in_oracle_venv
from tests.test_engine_oracle import (
    OracleCase,
    capplan_result,
    catalog_models,
    oracle_case_json,
    oracle_gpus,
    run_oracle,
)

CONFIGS = ROOT / "models_registry" / "catalog" / "configs"
RUNNER = ROOT / "tools" / "engine_oracle" / "vllm_oracle.py"
GIB = 2**30

# yuhuili/EAGLE-LLaMA3.1-Instruct-8B's dimensions (a one-layer Llama head over Llama-3.1-8B), written by hand
EAGLE_LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 1,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}


def _catalog(repo: str) -> ModelSpec:
    return parse_config(json.loads((CONFIGS / repo / "config.json").read_text()), name=repo)


def _eagle_spec(k: int = 3) -> SpeculativeSpec:
    draft = draft_shape(parse_config(EAGLE_LLAMA31_8B), SpecMethod.EAGLE, "eagle-llama3.1-8b")
    return SpeculativeSpec(SpecMethod.EAGLE, k, "eagle-llama3.1-8b", draft=draft)


# --- the draft's weights, by hand ------------------------------------------------------------------------


def test_eagle_head_weights_by_hand() -> None:
    """llama_eagle.py: one LlamaDecoderLayer without input_layernorm, fc (2h -> h, no bias), no final norm,
    embed_tokens and lm_head the target's. h 4096, 32 heads, 8 KV heads of 128, MLP 14336, fp16."""
    h, hd = 4096, 128
    qkv = h * (32 + 2 * 8) * hd
    o = 32 * hd * h
    mlp = 3 * h * 14336
    post_norm = h
    fc = 2 * h * h
    expected_bytes = (qkv + o + mlp + post_norm + fc) * 2
    target = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    kv_budget = 10 * GIB
    base = DeploymentSpec(engine="vllm", engine_version="0.33", max_model_len=8192, kv_cache_memory_bytes=kv_budget)
    plain = estimate(target, base, gpu=find_gpu_sku("h100-sxm-80gb"))
    spec = estimate(target, replace(base, speculative=_eagle_spec()), gpu=find_gpu_sku("h100-sxm-80gb"))
    assert spec.weights_bytes_per_gpu - plain.weights_bytes_per_gpu == expected_bytes
    # one more full-attention layer of 8 KV heads x 128, K and V, bf16 (the target's dtype), per token
    assert spec.kv_bytes_per_token - plain.kv_bytes_per_token == 2 * 8 * 128 * 2
    assert spec.not_modelled is None


def test_deepseek_mtp_weights_and_kv_by_hand() -> None:
    """deepseek_mtp.py: per MTP layer enorm, hnorm, eh_proj (2h -> h), shared_head.norm and one MoE decoder
    layer (MLA attention, 256 routed experts + 1 shared of 2048, the gate and its bias, two norms); the
    embedding and shared_head.head are the target's (`_maybe_share_*`: "Detected MTP model")."""
    h, heads = 7168, 128
    attention = (
        h * 1536  # q_a_proj
        + 1536  # q_a_layernorm
        + 1536 * heads * (128 + 64)  # q_b_proj
        + h * (512 + 64)  # kv_a_proj_with_mqa
        + 512  # kv_a_layernorm
        + 512 * heads * (128 + 128)  # kv_b_proj
        + heads * 128 * h  # o_proj
    )
    experts = 256 * 3 * h * 2048
    shared = 3 * h * 2048
    gate = 256 * h + 256  # weight + e_score_correction_bias
    layer = attention + experts + shared + gate + 2 * h
    mtp = layer + 3 * h + 2 * h * h
    target = _catalog("deepseek-ai/DeepSeek-V3")
    assert target.mtp_layers == 1
    assert target.mtp_params == mtp
    d = DeploymentSpec(engine="vllm", engine_version="0.33", tp=8, max_model_len=8192, kv_cache_memory_bytes=GIB)
    plain = estimate(target, d, gpu=find_gpu_sku("h200"))
    with_mtp = estimate(target, replace(d, speculative=SpeculativeSpec(SpecMethod.MTP, 1)), gpu=find_gpu_sku("h200"))
    # one more MLA layer: the latent (512) + rope key (64), bf16, replicated on every rank
    assert with_mtp.kv_bytes_per_token_per_gpu - plain.kv_bytes_per_token_per_gpu == (512 + 64) * 2
    added = with_mtp.weights_bytes_per_gpu - plain.weights_bytes_per_gpu
    # fp8 block-quantized checkpoint: one byte a parameter plus the scales, over TP 8
    assert mtp / 8 <= added <= mtp / 8 * 1.02


def test_sglang_holds_the_mtp_embedding_and_head_copies_when_it_sizes_the_pool() -> None:
    """SGLang 0.5.23 builds the draft worker (DeepseekV3ForCausalLMNextN: its own embed_tokens and lm_head,
    129,280 x 7,168 each, bf16 in the fp8 checkpoint) before `Scheduler.init_memory_pools`, and swaps in the
    target's only in `init_lm_head` after: the pool is sized with the copies resident, vLLM's without them."""
    target = _catalog("deepseek-ai/DeepSeek-V3")
    h200 = find_gpu_sku("h200")
    added = {}
    for engine in ("vllm", "sglang"):
        d = DeploymentSpec(engine=engine, tp=8, max_model_len=8192)
        plain = estimate(target, d, gpu=h200).weights_bytes_per_gpu
        mtp = estimate(target, replace(d, speculative=SpeculativeSpec(SpecMethod.MTP, 1)), gpu=h200)
        added[engine] = mtp.weights_bytes_per_gpu - plain
    copies = 2 * 129_280 * 7_168 * 2 // 8
    assert abs(added["sglang"] - added["vllm"] - copies) <= 1


def test_sglang_draft_layers_take_the_target_layer_size() -> None:
    """pool_configurator.py: cell_size += cell_size * draft_layers / num_layers, whatever the draft's heads:
    a Llama-3.2-1B draft (16 layers of 8 x 64) over Llama-3.1-8B (32 of 8 x 128) doubles... by 16/32."""
    target = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    draft = draft_shape(_catalog("meta-llama/Llama-3.2-1B-Instruct"), SpecMethod.DRAFT_MODEL, "llama-1b")
    spec = SpeculativeSpec(SpecMethod.DRAFT_MODEL, 3, "llama-1b", draft=draft, num_draft_tokens=4)
    d = DeploymentSpec(engine="sglang", max_model_len=8192, kv_cache_memory_bytes=10 * GIB)
    plain = estimate(target, d, gpu=find_gpu_sku("h100-sxm-80gb"))
    est = estimate(target, replace(d, speculative=spec), gpu=find_gpu_sku("h100-sxm-80gb"))
    cell = 32 * 2 * 8 * 128 * 2
    assert plain.kv_bytes_per_token == cell
    assert est.kv_bytes_per_token == cell + cell * 16 // 32
    assert est.max_num_seqs == 48  # _handle_eagle_family: --max-running-requests reset to 48
    # vLLM sizes the same draft in its own shapes: 16 layers of 8 KV heads x 64
    vllm = estimate(target, replace(d, engine="vllm", speculative=spec), gpu=find_gpu_sku("h100-sxm-80gb"))
    assert vllm.kv_bytes_per_token == cell + 16 * 2 * 8 * 64 * 2


def test_ngram_puts_nothing_on_the_gpu_and_trtllm_is_refused() -> None:
    target = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    d = DeploymentSpec(engine="vllm", max_model_len=8192, kv_cache_memory_bytes=10 * GIB)
    plain = estimate(target, d, gpu=find_gpu_sku("h100-sxm-80gb"))
    ngram_spec = from_vllm_config('{"method": "ngram", "num_speculative_tokens": 4}')
    ngram = estimate(target, replace(d, speculative=ngram_spec), gpu=find_gpu_sku("h100-sxm-80gb"))
    assert (ngram.weights_bytes_per_gpu, ngram.kv_cache_tokens) == (plain.weights_bytes_per_gpu, plain.kv_cache_tokens)
    with pytest.raises(SpecError, match="TensorRT-LLM"):
        estimate(target, replace(d, engine="trtllm", speculative=_eagle_spec()), gpu=find_gpu_sku("h100-sxm-80gb"))


def test_an_unknown_draft_is_assumed_and_said() -> None:
    target = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    spec = from_vllm_config('{"model": "someone/EAGLE3-unknown", "num_speculative_tokens": 2}')
    assert spec.method is SpecMethod.EAGLE3
    d = DeploymentSpec(engine="vllm", max_model_len=8192, speculative=spec)
    est = estimate(target, d, gpu=find_gpu_sku("h100-sxm-80gb"))
    assert est.not_modelled is None
    assert any("not in the catalog: assumed" in note for note in est.notes)


# --- parsing ---------------------------------------------------------------------------------------------


def test_vllm_config_methods_as_vllm_infers_them() -> None:
    """config/speculative.py __post_init__: no method -> ngram for model "ngram", else draft_model, renamed
    eagle / eagle3 by the draft's name; *_mtp spellings are mtp."""
    assert from_vllm_config('{"model": "ngram"}').method is SpecMethod.NGRAM
    assert from_vllm_config('{"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B"}').method is SpecMethod.EAGLE
    assert from_vllm_config('{"model": "AngelSlim/Qwen3-8B_eagle3"}').method is SpecMethod.EAGLE3
    assert from_vllm_config('{"model": "meta-llama/Llama-3.2-1B"}').method is SpecMethod.DRAFT_MODEL
    mtp = from_vllm_config('{"method": "deepseek_mtp", "num_speculative_tokens": 2}')
    assert (mtp.method, mtp.verify_tokens_per_sequence) == (SpecMethod.MTP, 3)
    for bad in (
        "{",
        "[1]",
        '{"method": "magic"}',
        '{"method": "draft_model"}',
        '{"model": "x", "num_speculative_tokens": 0}',
    ):
        with pytest.raises(SpeculativeConfigError):
            from_vllm_config(bad)


def test_sglang_flags_and_their_defaults() -> None:
    """speculative_hook.py: EAGLE without a draft path on DeepSeek runs its MTP layers; without
    --speculative-num-steps, (steps, topk, draft tokens) = (5, 4, 8) for Llama, (3, 1, 4) otherwise."""
    llama = from_sglang_flags("EAGLE", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", architecture="LlamaForCausalLM")
    assert (llama.num_speculative_tokens, llama.eagle_topk, llama.verify_tokens_per_sequence) == (5, 4, 8)
    nextn = from_sglang_flags("NEXTN", "deepseek-ai/DeepSeek-V3", architecture="DeepseekV3ForCausalLM")
    assert (nextn.method, nextn.draft_model, nextn.num_speculative_tokens) == (SpecMethod.MTP, None, 3)
    assert from_sglang_flags("EAGLE", None, 2, 1, 3).method is SpecMethod.MTP
    for bad in (("LOOKAHEAD",), ("EAGLE", "x", 3, 0, 4), ("EAGLE", "x", 3, 1, 0)):
        with pytest.raises(SpeculativeConfigError):
            from_sglang_flags(*bad)  # type: ignore[arg-type]


# --- speed ----------------------------------------------------------------------------------------------


def test_accepted_tokens_per_step() -> None:
    """1 + a + ... + a^k (Leviathan et al. 2023): a = 0.8, k = 3 -> 2.952; a = 0 -> 1; a = 1 -> k + 1."""
    assert accepted_tokens_per_step(0.8, 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert accepted_tokens_per_step(0.0, 5) == 1.0
    assert accepted_tokens_per_step(1.0, 4) == 5.0
    with pytest.raises(SpeculativeConfigError):
        accepted_tokens_per_step(1.5, 3)


def test_speed_at_acceptance() -> None:
    """The step is the verify of B (k + 1) tokens plus k draft passes; TPOT = step / tokens per step."""
    target = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    gpu = find_gpu_sku("h100-sxm-80gb")
    spec = _eagle_spec(3)
    est = estimate(target, DeploymentSpec(max_model_len=8192, speculative=spec), gpu=gpu)
    base = performance(target, est, gpu, concurrency=8, input_tokens=1000, output_tokens=200, chunk_tokens=8192)
    assert base.inputs is not None
    eff = efficiency_for("vllm", gpu)
    ngram = SpeculativeSpec(SpecMethod.NGRAM, 3)
    assert speculative_step_seconds(base.inputs, None, ngram, 8, 1100, eff) == step_seconds(
        base.inputs, 8 * 4, 8, 1100, eff
    )
    slow = at_acceptance(base, spec, spec.draft, 0.0, 2)
    fast = at_acceptance(base, spec, spec.draft, 0.8, 2)
    # the same step, 2.952 tokens per sequence instead of 1
    assert slow.tpot_ms / fast.tpot_ms == pytest.approx(accepted_tokens_per_step(0.8, 3))
    # a closed loop: 200 output tokens' steps at the speculative TPOT plus each of the 8 prompts' prefill
    assert fast.output_tokens_per_second == pytest.approx(8 * 200 / (200 * fast.tpot_ms / 1e3 + 8 * fast.prefill_ms / 1e3))
    # without speculation: the TPOT of the same deployment with no draft at all (its weights not read)
    plain_est = estimate(target, DeploymentSpec(max_model_len=8192), gpu=gpu)
    plain = performance(target, plain_est, gpu, concurrency=8, input_tokens=1000, output_tokens=200, chunk_tokens=8192)
    assert fast.speculation is not None
    assert fast.speculation.plain_tpot_ms == pytest.approx(plain.tpot_ms, rel=1e-9)
    assert slow.tpot_ms > plain.tpot_ms  # a draft that is never accepted only costs
    assert fast.tpot_ms < plain.tpot_ms  # a memory-bound decode of 8 gains from 3 tokens a step at 0.8


# --- vLLM's own planner ---------------------------------------------------------------------------------


def _vllm_plan(layers: list[dict[str, Any]], memory: int) -> dict[str, Any]:
    case = {
        "id": "spec",
        "tp": 1,
        "pp": 1,
        "layers": layers,
        "model_dtype": "bfloat16",
        "kv_cache_dtype": "auto",
        "block_size": 16,
        "max_model_len": 8192,
        "max_num_batched_tokens": 8192,
        "async_scheduling": True,
        "available_memory_bytes": memory,
    }
    proc = run_in_oracle_venv(RUNNER, {"cases": [case]}, timeout_s=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("@@vllm-oracle@@ ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    reply: dict[str, Any] = json.loads(lines[-1].split(" ", 1)[1])["cases"][0]
    return reply


def _full(config: dict[str, Any], layers: int) -> list[dict[str, Any]]:
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head = config.get("head_dim") or config["hidden_size"] // heads
    return [{"kind": "full", "num_kv_heads": kv, "head_size": head, "head_size_v": head}] * layers


@pytest.mark.engine_oracle
@pytest.mark.parametrize("draft_kind", ["eagle", "draft_model"])
def test_vllm_planner_with_the_draft_layers(draft_kind: str) -> None:
    """The target's 32 layers plus the drafter's (an EAGLE head: 1 layer of 8 x 128; Llama-3.2-1B as draft
    model: 16 layers of 8 x 64, one UniformTypeKVCacheSpecs group) planned by vLLM 0.33 in 10 GiB."""
    require_oracle_venv()
    target_config = json.loads((CONFIGS / "meta-llama/Llama-3.1-8B-Instruct/config.json").read_text())
    if draft_kind == "eagle":
        draft_config, spec = EAGLE_LLAMA31_8B, _eagle_spec()
    else:
        draft_config = json.loads((CONFIGS / "meta-llama/Llama-3.2-1B-Instruct/config.json").read_text())
        shape = draft_shape(parse_config(draft_config), SpecMethod.DRAFT_MODEL, "llama-1b")
        spec = SpeculativeSpec(SpecMethod.DRAFT_MODEL, 3, "llama-1b", draft=shape)
    memory = 10 * GIB
    layers = _full(target_config, target_config["num_hidden_layers"]) + _full(
        draft_config, draft_config["num_hidden_layers"]
    )
    vllm = _vllm_plan(layers, memory)
    d = DeploymentSpec(
        engine="vllm",
        engine_version="0.33",
        max_model_len=8192,
        max_num_batched_tokens=8192,
        kv_cache_memory_bytes=memory,
        speculative=spec,
    )
    est = estimate(parse_config(target_config), d, gpu=find_gpu_sku("h100-sxm-80gb"))
    assert (est.num_blocks, est.kv_cache_tokens) == (vllm["num_blocks"], vllm["kv_cache_size_tokens"])


# --- the command line -----------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from pipelines.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False, cwd=ROOT)


def test_cli_bad_speculative_config_is_one_line() -> None:
    proc = _cli("estimate", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb", "--speculative-config", "{x")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not JSON" in proc.stderr
    proc = _cli("estimate", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb", "--acceptance-rate", "0.5")
    assert proc.returncode == 2 and "needs speculative decoding" in proc.stderr


def test_cli_pasted_sglang_command_is_sized() -> None:
    command = (
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --speculative-algorithm EAGLE "
        "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
    )
    proc = _cli("estimate", "--from-command", command, "--gpu", "h200", "--json")
    assert proc.returncode == 0, proc.stderr
    contract = json.loads(proc.stdout)
    assert contract["modelled"] is True
    assert any("MTP layers" in note for note in contract["notes"])
    assert Engine(contract["engine"]) is Engine.SGLANG


# --- workloads: speculative decoding and its acceptance rate in the plan ------------------------------


def test_workload_profile_reads_speculative_and_acceptance_rate() -> None:
    document = {
        "workloads": [
            {
                "name": "chat",
                "model": "deepseek-ai/DeepSeek-V3",
                "target_concurrency": 64,
                "context_tokens": 4096,
                "speculative": {"method": "mtp", "num_speculative_tokens": 2},
                "acceptance_rate": 0.8,
            },
            {"name": "no-draft", "model": "m", "target_concurrency": 1, "context_tokens": 1024, "acceptance_rate": 0.5},
            {
                "name": "bad-rate",
                "model": "m",
                "target_concurrency": 1,
                "context_tokens": 1024,
                "speculative": {"method": "ngram"},
                "acceptance_rate": 1.5,
            },
            {"name": "bad-json", "model": "m", "target_concurrency": 1, "context_tokens": 1024, "speculative": "{"},
        ]
    }
    parsed = parse_workloads(document)
    (chat,) = parsed.profiles
    assert chat.speculative is not None and chat.speculative.method is SpecMethod.MTP
    assert (chat.speculative.num_speculative_tokens, chat.acceptance_rate) == (2, 0.8)
    errors = dict(parsed.errors)
    assert "acceptance_rate" in errors["no-draft"] and "acceptance_rate" in errors["bad-rate"]
    assert "not JSON" in errors["bad-json"]


def test_placement_runs_at_the_acceptance_rate() -> None:
    """ngram proposals (nothing on the GPU): the pool and B_max are the plain deployment's; each replica's TPOT is
    one verify step of B x (k + 1) tokens over (1 - a^(k+1)) / (1 - a) tokens, on the performance model's step."""
    target = _catalog("meta-llama/Llama-3.1-8B-Instruct")
    h100 = find_gpu_sku("h100-sxm-80gb")
    base = WorkloadProfile(
        "chat", ("llama",), 64, 4096, output_tokens=512, gpus=(h100.id,), tp_sizes=(1,), pp_sizes=(1,)
    )
    ngram = replace(base, speculative=SpeculativeSpec(SpecMethod.NGRAM, 3), acceptance_rate=0.6)
    plain_option = place(target, base, [h100], model_id="llama").options[0]
    spec_option = place(target, ngram, [h100], model_id="llama").options[0]
    assert spec_option.b_max == plain_option.b_max
    b = spec_option.planned_per_replica
    est = estimate(target, DeploymentSpec(max_model_len=4096), gpu=h100, context_tokens=4096)
    p = perf_inputs(target, est, h100)
    eff = efficiency_for("vllm", h100)
    verify_s = step_seconds(p, b * 4, b, 4096 - 512 + 256, eff)
    assert spec_option.tpot_ms == pytest.approx(verify_s * 1e3 / (1 + 0.6 + 0.36 + 0.216))


# --- SGLang's own pool configurator ---------------------------------------------------------------------

_SGLANG_DRAFT_CELL = r"""
import json, sys, types
import sglang.srt.model_executor.pool_configurator as pc

# only the draft branch of DefaultPoolConfigurator.__init__ runs as released: the per-layer cell size (checked
# by tests/test_engine_sglang.py's oracle) is given, and the runtime singletons it reads are the defaults
pc.get_parallel = lambda: types.SimpleNamespace(attn_dcp_size=1)
pc.get_schedule = lambda: types.SimpleNamespace(max_total_tokens=None)
pc.get_memory = lambda: types.SimpleNamespace(enable_hisparse=False)
pc.mambaish_config = lambda model_config: None
pc.compute_page_shard_scratch_bytes = lambda kvc, include_mtp=False: 0
pc.is_deepseek_dsa = lambda hf_config: False
out = []
for case in json.loads(sys.stdin.read()):
    pc.DefaultPoolConfigurator._compute_cell_size = lambda self, kvc, n, c=case: c["cell_per_layer"] * n
    kvc = types.SimpleNamespace(
        kv_cache_dtype_str="auto",
        model_config=types.SimpleNamespace(context_len=8192, hf_config=types.SimpleNamespace()),
        layer_info=types.SimpleNamespace(num_effective_layers=case["layers"]),
        pp_size=1,
        is_draft_worker=False,
        spec_algorithm=types.SimpleNamespace(is_eagle=lambda: True, is_standalone=lambda: False,
                                             is_dflash_family=lambda: False),
        spec_aux_config=types.SimpleNamespace(eagle_draft_num_layers=case["draft_layers"]),
        fused_entry_bytes=lambda name: None,
    )
    configurator = pc.DefaultPoolConfigurator(kvc)
    out.append(configurator.calculate_pool_sizes(case["budget"], case["page"]).max_total_num_tokens)
print("@@ORACLE@@" + json.dumps(out))
"""


@pytest.mark.engine_oracle
def test_sglang_pool_with_draft_layers_equals_sglang_own_configurator() -> None:
    """SGLang 0.5.23 `DefaultPoolConfigurator`: the target's cell grows by the draft's layers at the target's
    per-layer size; capplan's pool (Llama-3.1-8B with a 1-layer EAGLE head or a 16-layer draft model, DeepSeek-V3
    with its MTP layer) holds as many tokens as SGLang's."""
    require_oracle_venv()
    eagle = _eagle_spec()
    one_b = draft_shape(_catalog("meta-llama/Llama-3.2-1B-Instruct"), SpecMethod.DRAFT_MODEL, "llama-1b")
    llama, deepseek = _catalog("meta-llama/Llama-3.1-8B-Instruct"), _catalog("deepseek-ai/DeepSeek-V3")
    setups = [
        (llama, eagle, 1, 32, 2 * 8 * 128 * 2, 1),
        (llama, SpeculativeSpec(SpecMethod.DRAFT_MODEL, 3, "llama-1b", draft=one_b), 16, 32, 2 * 8 * 128 * 2, 1),
        (deepseek, SpeculativeSpec(SpecMethod.MTP, 1), 1, 61, (512 + 64) * 2, 8),
    ]
    cases, mine = [], []
    for model, spec, draft_layers, layers, per_layer, tp in setups:
        for budget in (GIB, 10 * GIB + 12_345, 60 * GIB):
            for page in (1, 64):
                case = {"cell_per_layer": per_layer, "layers": layers, "draft_layers": draft_layers}
                cases.append({**case, "budget": budget, "page": page})
                d = DeploymentSpec(
                    engine="sglang", tp=tp, block_size=page, kv_cache_memory_bytes=budget, speculative=spec
                )
                mine.append(estimate(model, d, gpu=find_gpu_sku("h200")).kv_cache_tokens)
    done = run_sglang_in_oracle_venv(SGLANG_CPU_PREAMBLE + _SGLANG_DRAFT_CELL, cases, timeout_s=600)
    marker = [line for line in done.stdout.splitlines() if line.startswith("@@ORACLE@@")]
    assert marker, done.stderr[-2000:]
    assert mine == json.loads(marker[0][len("@@ORACLE@@") :])


@pytest.mark.engine_oracle
@pytest.mark.parametrize(
    ("repo", "tp"), [("deepseek-ai/DeepSeek-V3", 8), ("zai-org/GLM-4.5", 8), ("Qwen/Qwen3-Next-80B-A3B-Instruct", 4)]
)
def test_vllm_planner_with_the_mtp_layer(repo: str, tp: int) -> None:
    """MTP as vLLM 0.33 plans it: the target's layers (as tests/test_engine_oracle.py hands them to vLLM) plus one
    more layer of the target's attention (MLA for DeepSeek-V3, full for GLM-4.5, and for Qwen3-Next a full layer
    beside its GDN state groups, whose config states no MTP count: vLLM's default is 1), in 20 GiB."""
    require_oracle_venv()
    model = next(m for m in catalog_models() if m.repo_id == repo)
    gpu = next(g for g in oracle_gpus() if g.sku.id == "h100-sxm-80gb")
    case = OracleCase(repo, model, gpu, tp, "auto", 8192, 8192, 20 * GIB, {}, 1)
    body = oracle_case_json(case)
    body["layers"].append(dict([layer for layer in body["layers"] if layer["kind"] in ("full", "mla")][-1]))
    vllm = run_oracle({"cases": [body]})["cases"][0]
    ours = capplan_result(model, gpu, case.deployment(speculative=SpeculativeSpec(SpecMethod.MTP, 1)), 8192)
    assert (ours["num_blocks"], ours["kv_cache_size_tokens"]) == (vllm["num_blocks"], vllm["kv_cache_size_tokens"])
    assert sorted(ours["groups"]) == sorted((g["kind"], g["num_layers"]) for g in vllm["groups"])
