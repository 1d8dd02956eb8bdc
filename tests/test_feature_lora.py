"""LoRA adapter slots (issue 23 item 3): what vLLM 0.33 and SGLang 0.5.23 allocate on the GPU before the KV
cache, and what the adapters take in host memory.

Oracles: vLLM's own LoRA layer classes built on the CPU (tools/engine_oracle/vllm_lora_buffers.py, the
engine_oracle group), and hand derivations from the engines' source, each shape cited:

* vLLM lora/layers/base_linear.py BaseLinearLayerWithLoRA.create_lora_weights and
  column_parallel_linear.py MergedColumnParallelLinearWithLoRA.create_lora_weights: A (slots, 1, rank, in),
  B (slots, 1, out, rank) per slice; column-parallel outputs / row-parallel inputs split by TP;
  QKVParallelLinear keeps one KV head per rank when TP exceeds the KV heads.
* vLLM lora/layers/fused_moe.py _create_lora_a_weights / _create_lora_b_weights: per local expert, w1 and
  w3 A (rank, hidden) and B (intermediate / TP, rank), w2 A (rank, intermediate / TP) and B (hidden, rank).
* vLLM vocab_parallel_embedding.py / logits_processor.py: embedding A (vocab, rank), B (hidden, rank); head
  A (rank, hidden), B (vocab, rank), neither split by TP.
* vLLM punica_wrapper/punica_base.py __init__: four torch.long tensors of max_num_batched_tokens and three
  of max_num_seqs; punica_gpu.py: two LoRAKernelMeta.make (ops/triton_ops/lora_kernel_metadata.py): int32
  tensors of 2 x tokens, 2 x (slots + 1), slots + 2.
* SGLang lora/mem_pool.py get_lora_A_shape / get_lora_B_shape: (slots, rank x stacked, in) and
  (slots, out, rank); get_embedding_lora_B_shape: the LM head's B split by TP; max_loras_per_batch
  defaults to 8 (arg_groups/fields/lora.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from capacity.engines.kinds import Engine
from capacity.engines.vllm.overhead import cudagraph_capture_counts, inputs_buffers
from capacity.estimate import estimate
from capacity.features.lora import AdapterSet, LoraSpec, lora_memory
from capacity.hf_config import parse_config
from capacity.overhead import OverheadInputs
from capacity.placement import Layout, size_layout
from capacity.spec import DeploymentSpec, SpecError
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app
from recommendations.workloads import profile_from
from tests.conftest import SGLANG_CPU_PREAMBLE, require_oracle_venv, run_in_oracle_venv, run_sglang_in_oracle_venv

RUNNER = Path(__file__).resolve().parents[1] / "tools" / "engine_oracle" / "vllm_lora_buffers.py"
SGLANG_RUNNER = RUNNER.with_name("sglang_lora_buffers.py")

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
TINY = {  # one Llama decoder geometry small enough to build vLLM's layers on the CPU
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


@pytest.mark.engine_oracle
@pytest.mark.parametrize(("tp", "fully_sharded"), [(1, False), (4, False), (4, True)])
def test_vllm_slots_match_vllms_own_lora_layers(tp: int, fully_sharded: bool) -> None:
    """vLLM's LoRA wrappers of one decoder layer, the embedding and the head, run `create_lora_weights` on
    the CPU: capplan's slot bytes are two layers of them plus the embedding and the head."""
    require_oracle_venv()
    case = {"hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512, "vocab": 1000}
    case |= {"rank": 16, "slots": 3, "dtype": "bfloat16", "tp": tp, "fully_sharded": fully_sharded}
    done = run_in_oracle_venv(RUNNER, case, 300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@lora-oracle@@ "))
    vllm = json.loads(line.removeprefix("@@lora-oracle@@ "))["bytes"]
    per_layer = sum(vllm[name] for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"))
    spec = LoraSpec(max_loras=3, max_lora_rank=16, lora_dtype="bfloat16", fully_sharded=fully_sharded)
    got = lora_memory(parse_config(TINY), spec, Engine.VLLM, tp, 1, 2, 2048, 16)
    assert got.slot_bytes_per_gpu == 2 * per_layer + vllm["embed_tokens"] + vllm["lm_head"]


@pytest.mark.engine_oracle
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_sglang_slots_match_sglangs_own_memory_pool(tp: int) -> None:
    """SGLang's LoRAMemoryPool for the same geometry (2 layers), every module targeted, its own ParallelLMHead
    sizing the head's B: capplan's slot bytes are its buffers' (embedding and head twice, the pool's quirk)."""
    require_oracle_venv()
    case = {"hidden": 256, "heads": 8, "kv_heads": 2, "head_dim": 32, "intermediate": 512, "vocab": 1000}
    modules = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "embed_tokens", "lm_head"]
    case |= {"layers": 2, "rank": 16, "slots": 3, "tp": tp, "targets": modules}
    script = SGLANG_CPU_PREAMBLE + SGLANG_RUNNER.read_text(encoding="utf-8")
    done = run_sglang_in_oracle_venv(script, case, timeout_s=300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("@@sglang-lora@@ "))
    sglang = json.loads(line.removeprefix("@@sglang-lora@@ "))["bytes"]
    spec = LoraSpec(max_loras=3, max_lora_rank=16, target_modules=("all",))
    assert lora_memory(parse_config(TINY), spec, Engine.SGLANG, tp, 1, 2, 2048, 16).slot_bytes_per_gpu == sglang


def _llama() -> Any:
    return load_model(LLAMA).spec


def test_vllm_llama_8b_default_slot_by_hand() -> None:
    """Llama-3.1-8B (hidden 4,096, 32 / 8 heads of 128, intermediate 14,336, vocab 128,256), vLLM's defaults:
    1 slot of rank 16, every linear module plus the embedding and head (LlamaForCausalLM declares both).
    Per layer: qkv 3*16*4096 + (4096+1024+1024)*16 = 294,912; o 16*4096 + 4096*16 = 131,072;
    gate_up 2*16*4096 + 2*14336*16 = 589,824; down 16*14336 + 4096*16 = 294,912: 1,310,720 x 32 layers.
    Embedding 128256*16 + 4096*16 = 2,117,632; head 16*4096 + 128256*16 = 2,117,632. bf16: 2 bytes."""
    got = lora_memory(_llama(), LoraSpec(), Engine.VLLM, 1, 1, 2, 8192, 256)
    assert got.slot_bytes_per_gpu == (1_310_720 * 32 + 2 * 2_117_632) * 2 == 92_356_608
    # punica: (4 x 8192 + 3 x 256) longs + 2 x (2 x 8192 + 2 x 2 + 3) int32
    assert got.metadata_bytes_per_gpu == (4 * 8192 + 3 * 256) * 8 + 2 * (2 * 8192 + 2 * 2 + 3) * 4
    assert got.host_bytes_per_gpu == 92_356_608  # max_cpu_loras defaults to max_loras: one adapter, whole
    assert got.not_modelled is None


def test_sglang_llama_8b_tp2_all_modules_by_hand() -> None:
    """SGLang, TP 2, --lora-target-modules all, rank 16, its default 8 slots. Per layer on one rank:
    qkv 3*16*4096 + (2048+512+512)*16 = 245,760; o 16*2048 + 4096*16 = 98,304; gate_up 2*16*4096 +
    2*7168*16 = 360,448; down 16*7168 + 4096*16 = 180,224: 884,736 x 32. Embedding A (16, 128256) and B
    (4096, 16): 2,117,632; head A (16, 4096) and B split by TP (128,256 is a multiple of 64: 64,128 rows):
    1,091,584. Both targeted, init_buffers fills its embedding pool and its head pool with both (each
    init_embedding_buffer call takes every EMBEDDING_NAMES target): twice."""
    spec = LoraSpec(max_lora_rank=16, target_modules=("all",))
    got = lora_memory(_llama(), spec, Engine.SGLANG, 2, 1, 2, 8192, 256)
    assert got.slot_bytes_per_gpu == (884_736 * 32 + 2 * (2_117_632 + 1_091_584)) * 8 * 2
    assert got.metadata_bytes_per_gpu == 0 and got.shrink_buffer_bytes_per_gpu == 0
    # host: 8 adapters (--max-loaded-loras defaults to the slots here), each its own weights once, whole:
    # per layer at TP 1 3*16*4096 + 6144*16 + 2*16*4096 + 2*(16*4096) + 2*14336*16 + 16*14336 + 4096*16
    layer = 3 * 16 * 4096 + 6144 * 16 + 2 * 16 * 4096 + 2 * 16 * 4096 + 2 * 14336 * 16 + 16 * 14336 + 4096 * 16
    assert got.host_bytes_per_gpu == (layer * 32 + 2 * 2_117_632) * 8 * 2


def test_vllm_moe_experts_and_router_by_hand() -> None:
    """Qwen3-30B-A3B (hidden 2,048, 32 / 4 heads of 128, 128 experts of intermediate 768, vocab 151,936), rank
    16, 1 slot, TP 1. Per layer: qkv 3*16*2048 + (4096+512+512)*16 = 180,224; o 16*4096 + 2048*16 = 98,304;
    router A (16, 2048) B (128, 16) = 34,816; per expert w1+w3 2*(16*2048 + 768*16) + w2 16*768 + 2048*16 =
    135,168, x 128. Embedding and head (Qwen3MoeForCausalLM declares both): 151936*16 + 2048*16 each."""
    model = load_model("Qwen/Qwen3-30B-A3B").spec
    got = lora_memory(model, LoraSpec(), Engine.VLLM, 1, 1, 2, 8192, 256)
    layer = 180_224 + 98_304 + 34_816 + 135_168 * 128
    assert got.slot_bytes_per_gpu == (layer * 48 + 2 * (151_936 * 16 + 2048 * 16)) * 2


def test_targets_rank_slots_and_dtype_scale_the_slots() -> None:
    """q_proj and v_proj alone still take the whole packed qkv buffer (vLLM wraps the packed module; SGLang
    normalizes both to qkv_proj); the bytes scale with slots x rank and the dtype's width."""
    model = _llama()
    qv = lora_memory(model, LoraSpec(target_modules=("q_proj", "v_proj")), Engine.VLLM, 1, 1, 2, 8192, 256)
    assert qv.slot_bytes_per_gpu == (3 * 16 * 4096 + (4096 + 1024 + 1024) * 16) * 32 * 2
    scaled = lora_memory(model, LoraSpec(4, 64, target_modules=("q_proj",)), Engine.VLLM, 1, 1, 2, 8192, 256)
    assert scaled.slot_bytes_per_gpu == qv.slot_bytes_per_gpu * 4 * 4


def test_estimate_charges_the_slots_before_the_kv_budget() -> None:
    """vLLM: the budget is utilization x total - weights - overhead. The slots and metadata join the weights
    (load_model creates them), the profiling shrink buffer the activation peak, and the CUDA-graph estimate
    counts twice the graphs (a set without and a set with adapters per size: cudagraph_dispatcher.py
    _get_lora_cases), so its per-graph part doubles: the KV budget loses exactly their sum."""
    resolved = load_model(LLAMA)
    h100 = find_gpu_sku("H100")
    base = DeploymentSpec(max_model_len=8192, max_num_batched_tokens=4096)
    spec = LoraSpec(max_loras=4, max_lora_rank=64)
    plain = estimate(resolved.spec, base, gpu=h100, checkpoint_bytes=resolved.checkpoint_bytes)
    with_lora = estimate(resolved.spec, replace(base, lora=spec), gpu=h100, checkpoint_bytes=resolved.checkpoint_bytes)
    lora = with_lora.lora
    assert lora is not None and with_lora.not_modelled is None
    graphs = with_lora.cuda_graph_bytes_per_gpu - plain.cuda_graph_bytes_per_gpu
    assert graphs > 0
    lost = lora.slot_bytes_per_gpu + lora.metadata_bytes_per_gpu + lora.shrink_buffer_bytes_per_gpu + graphs
    assert plain.kv_budget_bytes_per_gpu - with_lora.kv_budget_bytes_per_gpu == lost
    assert with_lora.kv_cache_tokens < plain.kv_cache_tokens
    # the gate/up shrink buffer of the profiling batch: 2 slices x 4,096 tokens x rank 64, float32
    assert (
        dict(with_lora.activation_buffers)["LoRA shrink buffer (float32, slices x tokens x rank)"] == 2 * 4096 * 64 * 4
    )


def test_vllm_captures_twice_the_graphs_with_lora() -> None:
    """The graph count the CUDA-graph estimate scales with doubles (the product of the capture sizes and the
    two LoRA cases, cudagraph_dispatcher.py initialize_cudagraph_keys), for PIECEWISE and FULL alike."""
    inputs = OverheadInputs(load_model(LLAMA).spec, 1, 1, 4096, 256, 2)
    plain = inputs_buffers(inputs, "0.33.0").graph_count
    assert inputs_buffers(replace(inputs, cudagraph_cases=2), "0.33.0").graph_count == 2 * plain
    assert plain == sum(cudagraph_capture_counts(256, 4096))


def _cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["estimate", *args])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-lora-rank", "0"], "--max-lora-rank must be >= 1"),
        (["--max-loras", "4", "--max-cpu-loras", "2"], "--max-cpu-loras (2) must be >= --max-loras (4)"),
        (["--lora-dtype", "int8"], "--lora-dtype must be one of"),
        (["--lora-target-modules", "q_proj,bogus"], "unknown LoRA target module 'bogus'"),
    ],
)
def test_refused_lora_options_are_one_line_errors(flags: list[str], message: str) -> None:
    result = _cli(LLAMA, "--gpu", "H100", *flags)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_pasted_sglang_lora_flags_match_the_capplan_options() -> None:
    """SGLang's --max-loras-per-batch / --max-lora-rank / --max-loaded-loras / --lora-target-modules are
    read as --max-loras / --max-lora-rank / --max-cpu-loras / --lora-target-modules."""
    line = (
        f"python -m sglang.launch_server --model-path {LLAMA} --lora-paths a=/x b=/y --max-loras-per-batch 4 "
        "--max-lora-rank 32 --max-loaded-loras 6 --lora-target-modules q_proj v_proj"
    )
    pasted = _cli("--gpu", "H100", "--json", "--from-command", line)
    options = [
        "--engine",
        "sglang",
        "--enable-lora",
        "--max-loras",
        "4",
        "--max-lora-rank",
        "32",
        "--max-cpu-loras",
        "6",
    ]
    by_hand = _cli(LLAMA, "--gpu", "H100", "--json", *options, "--lora-target-modules", "q_proj v_proj")
    assert pasted.exit_code == 0 and by_hand.exit_code == 0, pasted.output + by_hand.output
    got, want = json.loads(pasted.output), json.loads(by_hand.output)
    assert got["modelled"] is True
    assert {k: v for k, v in got.items() if k != "notes"} == {k: v for k, v in want.items() if k != "notes"}


def test_workload_adapters_set_the_plans_slots() -> None:
    """A workload's `adapters:` sets max_loras (one GPU slot per adapter unless `slots` caps it), the rank, and
    every adapter in host memory; the placement sizes the replica with them, so it holds fewer sequences."""
    entry = {"name": "tenants", "model": LLAMA, "target_concurrency": 16, "context_tokens": 4096}
    served = profile_from(entry | {"adapters": {"count": 4, "rank": 64}}, {})
    assert served.adapters is not None and served.adapters.lora_spec() == LoraSpec(4, 64, 4)
    assert profile_from(entry | {"adapters": 3}, {}).adapters == AdapterSet(3)
    capped = AdapterSet.parse({"count": 40, "slots": 8, "rank": 16}).lora_spec()
    assert (capped.max_loras, capped.max_cpu_loras) == (8, 40)
    resolved = load_model(LLAMA)
    layout = Layout(find_gpu_sku("H100"), 1, 1, "auto", "auto")
    plain = size_layout(resolved.spec, layout, profile_from(entry, {}), model_id=LLAMA)
    with_adapters = size_layout(resolved.spec, layout, served, model_id=LLAMA)
    assert not isinstance(plain, str) and not isinstance(with_adapters, str)
    assert with_adapters.b_max < plain.b_max


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "adapters.count must be a whole number >= 1"),
        ({"count": 2, "rank": True}, "adapters.rank must be a whole number >= 1"),
        ({"rank": 8}, "give count"),
        ({"count": 2, "slots": 3}, "adapters.slots (3) exceeds adapters.count (2)"),
        ({"count": 2, "alpha": 3}, "unknown key(s) alpha"),
    ],
)
def test_bad_adapters_entries_are_refused_with_a_reason(value: object, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        AdapterSet.parse(value)


def test_lora_settings_without_enable_lora_leave_it_off() -> None:
    """vLLM builds no LoRA config without --enable-lora (engine/arg_utils.py create_engine_config: `lora_config = LoRAConfig(...) if self.enable_lora else None`), whatever
    --max-loras says; SGLang likewise (--lora-paths turns it on): the pasted command is sized without adapters."""
    line = f"vllm serve {LLAMA} --max-model-len 8192 --max-loras 4 --max-lora-rank 64"
    off = _cli("--gpu", "H100", "--json", "--from-command", line)
    plain = _cli(LLAMA, "--gpu", "H100", "--json", "--max-model-len", "8192")
    assert off.exit_code == 0 and plain.exit_code == 0, off.output + plain.output
    assert json.loads(off.output)["kv_budget_bytes_per_gpu"] == json.loads(plain.output)["kv_budget_bytes_per_gpu"]


def test_vllm_3d_moe_experts_share_one_gate_up_a() -> None:
    """gpt-oss declares is_3d_moe_weight (gpt_oss.py): its routed experts take FusedMoE3DWithLoRA, whose w13 is
    one slice (`_w13_slices = 1`: A (slots, experts, rank, hidden), B (slots, experts, 2 x I / TP, rank)), where
    the 2-D wrapper keeps two As. The same layers under another name differ by one A per expert and layer:
    36 layers x 128 experts x rank 16 x hidden 2,880, bf16."""
    model = load_model("openai/gpt-oss-120b").spec
    fused = lora_memory(model, LoraSpec(), Engine.VLLM, 1, 1, 2, 8192, 256).slot_bytes_per_gpu
    two_d = lora_memory(replace(model, architecture="Other"), LoraSpec(), Engine.VLLM, 1, 1, 2, 8192, 256)
    assert two_d.slot_bytes_per_gpu - fused == 36 * 128 * 16 * 2880 * 2
