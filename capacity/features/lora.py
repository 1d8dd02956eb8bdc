"""LoRA adapters: what serving them takes on the GPU before the KV cache is sized, and in host memory.

Both vLLM 0.33 and SGLang 0.5.23 allocate, when the server starts, one stacked A and one stacked B buffer
per LoRA-wrapped linear module and adapter slot, at the largest rank the server accepts:

* A: slots x rank x (input width on this rank), B: slots x (output width on this rank) x rank, in the
  adapter dtype (vLLM `lora/layers/base_linear.py` BaseLinearLayerWithLoRA.create_lora_weights,
  `column_parallel_linear.py` MergedColumnParallelLinearWithLoRA.create_lora_weights; SGLang
  `lora/mem_pool.py` LoRAMemoryPool.get_lora_A_shape / get_lora_B_shape / init_buffers);
* a packed module (q/k/v, gate/up) keeps one A per slice (vLLM) or one A of rank x slices (SGLang): the
  same bytes; column-parallel outputs and row-parallel inputs are split by TP, the other side whole;
* routed experts: the same per local expert (vLLM `lora/layers/fused_moe.py` _create_lora_a_weights /
  _create_lora_b_weights, SGLang's 4-D `*_moe` buffers);
* the embedding (A: vocab x rank, B: hidden x rank) and the LM head (A: rank x hidden, B: vocab x rank),
  where they are targets (vLLM `vocab_parallel_embedding.py`, `logits_processor.py`; SGLang shards the
  head's B by TP, `get_embedding_lora_B_shape`).

vLLM creates them inside `load_model` (v1/worker/gpu_model_runner.py -> lora_model_runner_mixin.py
load_lora_model), so its "model loading" memory includes them; SGLang in `maybe_init_lora_manager`, after
the weights and before the KV pool (model_executor/model_runner.py initialize). Either way the KV budget
loses them: capplan charges them with the weights. vLLM's profiling run adds dummy adapters built on the
CPU (`create_dummy_lora(..., "cpu")`) into those slots: no new GPU memory, only the kernels' float32
shrink buffer (punica_gpu.py add_lora_linear: slices x tokens x rank) beside the MLP's activations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capacity.dtypes import GIB, element_bytes
from capacity.engines.kinds import Engine
from capacity.features.lora_spec import LINEAR_TARGETS, LoraMemory, LoraSpec, LoraTarget
from capacity.features.lora_trtllm import trtllm_peft_cache
from capacity.kv.kinds import FullAttention
from capacity.numeric import cdiv
from capacity.overhead import Overhead, OverheadInputs
from capacity.parallel import pp_partition
from capacity.spec import ModelSpec, SpecError
from capacity.weights import WeightsEstimate

_FP32_BYTES = 4  # the punica kernels' shrink buffer (punica_gpu.py: "float32 by default", triton #1387)
_INDEX_BYTES, _META_BYTES = 8, 4  # punica_base.py's torch.long indices, LoRAKernelMeta's int32 tensors


# vLLM 0.33 architectures whose class declares `embedding_modules` (read from each class with the
# oracle's vLLM: vllm/model_executor/models/*.py): with no --lora-target-modules their embedding (and LM
# head) get LoRA slots too (lora/utils.py get_supported_lora_modules)
_VLLM_EMBED_AND_HEAD = frozenset(
    {
        "ApertusForCausalLM",
        "DeciLMForCausalLM",
        "Ernie4_5ForCausalLM",
        "Exaone4ForCausalLM",
        "ExaoneMoEForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteForCausalLM",
        "GraniteMoeForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "GraniteMoeSharedForCausalLM",
        "HyperCLOVAXForCausalLM",
        "InternLM3ForCausalLM",
        "JambaForCausalLM",
        "Lfm2ForCausalLM",
        "Lfm2MoeForCausalLM",
        "Llama4ForCausalLM",
        "LlamaForCausalLM",
        "MiniCPM3ForCausalLM",
        "MiniCPMForCausalLM",
        "MixtralForCausalLM",
        "NemotronForCausalLM",
        "NemotronHForCausalLM",
        "Phi3ForCausalLM",
        "PhiMoEForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "SolarForCausalLM",
        "TeleChat2ForCausalLM",
    }
)
_VLLM_EMBED_ONLY = frozenset(
    {
        "ArceeForCausalLM",
        "Cohere2ForCausalLM",
        "CohereForCausalLM",
        "GPTBigCodeForCausalLM",
        "GPTNeoXForCausalLM",
        "GlmForCausalLM",
        "HunYuanDenseV1ForCausalLM",
        "HunYuanMoEV1ForCausalLM",
        "Olmo2ForCausalLM",
        "Olmo3ForCausalLM",
        "OlmoForCausalLM",
        "PhiForCausalLM",
        "SeedOssForCausalLM",
        "SmolLM3ForCausalLM",
        "Starcoder2ForCausalLM",
        "VaultGemmaForCausalLM",
    }
)


def lora_spec(
    enabled: bool,
    max_loras: int | None = None,
    max_lora_rank: int | None = None,
    max_cpu_loras: int | None = None,
    lora_dtype: str | None = None,
    target_modules: str | None = None,
    fully_sharded: bool = False,
) -> LoraSpec | None:
    """The spec the CLI's options ask for; None without --enable-lora (SGLang's --lora-paths sets it too), as the
    engines leave LoRA off then whatever else is given. Raises SpecError with a one-line reason on a value no
    engine accepts, enabled or not."""
    for flag, value in (("--max-loras", max_loras), ("--max-lora-rank", max_lora_rank)):
        if value is not None and value < 1:
            raise SpecError(f"{flag} must be >= 1, got {value}")
    if max_cpu_loras is not None and max_cpu_loras < (max_loras or 1):
        raise SpecError(f"--max-cpu-loras ({max_cpu_loras}) must be >= --max-loras ({max_loras or 1})")
    modules = tuple(name for name in (target_modules or "").replace(",", " ").split() if name)
    try:
        spec = LoraSpec(max_loras, max_lora_rank, max_cpu_loras, (lora_dtype or "auto").lower(), modules, fully_sharded)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return spec if enabled else None


# vLLM 0.33 architectures with `is_3d_moe_weight` (gpt_oss.py, qwen3_vl_moe.py, qwen3_5.py, interns1_pro.py,
# qwen3_omni_moe_thinker.py; by the config architecture registry.py maps to them): their routed experts take
# FusedMoE3DWithLoRA, one A for gate and up together
_VLLM_3D_MOE = frozenset(
    {
        "GptOssForCausalLM",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "InternS1ProForConditionalGeneration",
        "Qwen3OmniMoeForConditionalGeneration",  # registry.py: the Thinker class serves it
    }
)


@dataclass(frozen=True, slots=True)
class AdapterSet:
    """The adapters a workload serves (its `adapters:` entry): how many distinct ones, their largest rank, and
    how many the GPU holds at once (default: all of them, so no request waits for a swap from host memory)."""

    count: int
    rank: int = 16
    slots: int | None = None

    @classmethod
    def parse(cls, value: object) -> AdapterSet:
        """`adapters: 4` or `adapters: {count: 40, rank: 64, slots: 8}`; SpecError with a one-line reason."""
        fields = {"count": value} if not isinstance(value, dict) else dict(value)
        unknown = set(fields) - {"count", "rank", "slots"}
        if unknown:
            raise SpecError(f"adapters: unknown key(s) {', '.join(sorted(map(str, unknown)))} (count, rank, slots)")
        numbers: dict[str, int] = {}
        for key, number in fields.items():
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise SpecError(f"adapters.{key} must be a whole number >= 1, got {number!r}")
            numbers[key] = number
        if "count" not in numbers:
            raise SpecError("adapters: give count (how many distinct adapters are served)")
        if numbers.get("slots", 1) > numbers["count"]:
            raise SpecError(f"adapters.slots ({numbers['slots']}) exceeds adapters.count ({numbers['count']})")
        return cls(**numbers)

    def lora_spec(self) -> LoraSpec:
        """The server settings that serve them: a GPU slot each (or `slots`), every adapter in host memory."""
        return LoraSpec(max_loras=self.slots or self.count, max_lora_rank=self.rank, max_cpu_loras=self.count)


@dataclass(frozen=True, slots=True)
class _EngineLora:
    """How one engine sizes its LoRA slots: its defaults and where its layout differs."""

    default_slots: int  # vLLM LoRAConfig.max_loras = 1; SGLang max_loras_per_batch = 8
    default_rank: int  # vLLM LoRAConfig.max_lora_rank = 16; SGLang infers it from --lora-paths (16 assumed)
    rank_stated_by_default: bool  # False: the engine reads the rank from the adapters, capplan assumes one
    wraps_every_module: bool  # no target modules given: every supported module (vLLM), else the adapters' own
    # SGLang shards the LM head's B as its ParallelLMHead (the vocabulary padded to 64, split by TP); vLLM keeps
    # the whole vocabulary on each rank
    head_b_split_by_tp: bool
    # SGLang (mem_pool.py init_buffers): with both the embedding and the head targeted, its embedding pool and its
    # head pool each allocate both (init_embedding_buffer takes every EMBEDDING_NAMES target), so twice the bytes;
    # and its buffers cover every hidden layer on every PP rank (num_layer = num_hidden_layers)
    sglang_pools: bool
    punica_metadata: bool  # vLLM's punica wrapper: index tensors of max_num_batched_tokens
    profiles_shrink_buffer: bool  # the KV budget follows a profiling run that runs the LoRA kernels (vLLM)
    read_from_source: bool  # False: the engine's own LoRA cache was not read (the plain profile): an estimate
    paged_peft_cache: bool = False  # TensorRT-LLM: a paged PEFT cache, not slots (`features.lora_trtllm`)


_ENGINE_LORA = {
    Engine.VLLM: _EngineLora(1, 16, True, True, False, False, True, True, True),
    Engine.SGLANG: _EngineLora(8, 16, False, False, True, True, False, False, True),
    Engine.TRTLLM: _EngineLora(1, 64, True, False, False, False, False, False, True, paged_peft_cache=True),
    Engine.PLAIN: _EngineLora(1, 16, True, True, False, False, False, False, False),
}


@dataclass(frozen=True, slots=True)
class _Widths:
    """One module's widths on one rank: its input, its output, and how many slices share A's input."""

    input_width: int
    output_width: int
    slices: int = 1


def _pair_elements(w: _Widths, rank: int, a_rank: int, b_output: int) -> int:
    """Elements of one slot's A and B for one module: slices x A (a_rank x input) + B (output x rank)."""
    return w.slices * a_rank * w.input_width + b_output * rank


def _module_elements(w: _Widths, rank: int, tp: int, column: bool, fully_sharded: bool) -> int:
    """One slot's elements for a column- or row-parallel module; fully sharded: A's rank split by TP on a
    column-parallel module, B's output split on a row-parallel one (base_linear.py create_lora_weights)."""
    if column:
        return _pair_elements(w, rank, cdiv(rank, tp) if fully_sharded else rank, w.output_width)
    return _pair_elements(w, rank, rank, cdiv(w.output_width, tp) if fully_sharded else w.output_width)


def _layer_elements(
    model: ModelSpec,
    index: int,
    targets: frozenset[LoraTarget],
    rank: int,
    tp: int,
    fully_sharded: bool,
    fused_experts: bool = False,
) -> tuple[int, bool]:
    """One slot's elements in decoder layer `index`, and whether its token mixer was left unsized (MLA, SSM).
    `fused_experts`: the routed experts' gate and up share one A (vLLM's FusedMoE3DWithLoRA, `_w13_slices = 1`)."""
    h = model.hidden_size
    params = model.layer_params[index]
    cache = next((layer.cache for layer in model.layers if layer.index == index), None)
    elements, unsized = 0, False
    if isinstance(cache, FullAttention) or (cache is not None and not (cache.latent or cache.holds_state)):
        head_dim = cache.k_head_dim if isinstance(cache, FullAttention) else model.head_dim
        kv_heads = cache.num_kv_heads if isinstance(cache, FullAttention) else model.num_kv_heads
        q_local = model.num_attention_heads * head_dim // tp
        kv_local = max(1, kv_heads // tp) * head_dim  # QKVParallelLinear: KV heads replicated below one per rank
        if LoraTarget.QKV in targets:
            elements += _module_elements(_Widths(h, q_local + 2 * kv_local, 3), rank, tp, True, fully_sharded)
        if LoraTarget.OUT in targets:
            elements += _module_elements(_Widths(q_local, h), rank, tp, False, fully_sharded)
    elif cache is not None:
        unsized = bool(targets & {LoraTarget.QKV, LoraTarget.OUT})
    experts = model.num_experts if params.experts else 0
    # (intermediate, how many, A slices of gate/up): a gated MLP or shared experts (3 x hidden x I), routed experts
    mlps = [(params.mlp // (3 * h), 1, 2)] if params.mlp else []
    if experts:
        mlps.append((params.experts // (3 * h * experts), experts, 1 if fused_experts else 2))
        if LoraTarget.ROUTER in targets:  # the router, a ReplicatedLinear: hidden -> experts, whole on each rank
            elements += _pair_elements(_Widths(h, experts), rank, rank, experts)
    for intermediate, count, slices in mlps:
        local = cdiv(intermediate, tp)
        if LoraTarget.GATE_UP in targets:
            elements += count * _module_elements(_Widths(h, 2 * local, slices), rank, tp, True, fully_sharded)
        if LoraTarget.DOWN in targets:
            elements += count * _module_elements(_Widths(local, h), rank, tp, False, fully_sharded)
    return elements, unsized


def _engine_targets(model: ModelSpec, engine: _EngineLora, spec: LoraSpec) -> frozenset[LoraTarget]:
    """The groups given, else the engine's default: vLLM wraps every linear module (the MoE router among
    them) and, where the model class declares them, its embedding and LM head; SGLang takes the adapters'
    own targets, which capplan does not see: the attention and MLP projections are assumed."""
    given = spec.targets()
    if given is not None:
        return given
    if not engine.wraps_every_module:
        return frozenset(LINEAR_TARGETS)
    default = {*LINEAR_TARGETS, LoraTarget.ROUTER}
    if model.architecture in _VLLM_EMBED_AND_HEAD:
        default |= {LoraTarget.EMBED, LoraTarget.LM_HEAD}
    elif model.architecture in _VLLM_EMBED_ONLY:
        default.add(LoraTarget.EMBED)
    return frozenset(default)


def _stage_elements(
    model: ModelSpec, engine: _EngineLora, targets: frozenset[LoraTarget], rank: int, tp: int, pp: int, fs: bool
) -> tuple[int, int]:
    """One slot's elements on the most loaded pipeline stage, and the layers whose mixer was not sized."""
    fused = engine.wraps_every_module and model.architecture in _VLLM_3D_MOE
    per_layer = [_layer_elements(model, i, targets, rank, tp, fs, fused) for i in range(len(model.layer_params))]
    v, h = model.vocab_size, model.hidden_size
    embed = v * rank + h * rank if LoraTarget.EMBED in targets else 0  # A: vocab x rank, B: hidden x rank
    # SGLang's head B: rank 0's share of the vocabulary padded to 64, or to 64 x TP where TP does not divide that
    # (vocab_parallel_embedding.py VocabParallelEmbedding.__init__, _get_indices: num_org_elements)
    pad = 64 if cdiv(v, 64) * 64 % tp == 0 else 64 * tp
    head_vocab = min(cdiv(v, pad) * pad // tp, v) if engine.head_b_split_by_tp else v
    head = rank * h + head_vocab * rank if LoraTarget.LM_HEAD in targets else 0
    if engine.sglang_pools and embed and head:
        embed, head = 2 * embed, 2 * head
    stages, start = [], 0
    sizes = [len(per_layer)] if engine.sglang_pools else pp_partition(len(per_layer), pp)
    for stage, size in enumerate(sizes):
        total = sum(n for n, _ in per_layer[start : start + size])
        total += embed if stage == 0 else 0
        total += head if stage == len(sizes) - 1 else 0
        stages.append(total)
        start += size
    return max(stages), sum(1 for _, unsized in per_layer if unsized)


def lora_memory(
    model: ModelSpec,
    spec: LoraSpec,
    engine: Engine,
    tp: int,
    pp: int,
    act_bytes: int,
    max_num_batched_tokens: int,
    max_num_seqs: int | None,
    free_bytes: int = 0,
) -> LoraMemory:
    """The GPU and host memory `spec` takes for `engine` on one rank of a TP x PP layout. `free_bytes`: what is
    free once the weights are loaded (TensorRT-LLM's default PEFT cache is a share of it)."""
    rules = _ENGINE_LORA[engine]
    if rules.paged_peft_cache:
        return trtllm_peft_cache(model, spec, tp, pp, act_bytes, free_bytes)
    slots = spec.max_loras or rules.default_slots
    rank = spec.max_lora_rank or rules.default_rank
    dtype_bytes = act_bytes if spec.lora_dtype == "auto" else element_bytes(spec.lora_dtype)
    targets = _engine_targets(model, rules, spec)
    fully_sharded = spec.fully_sharded and engine is Engine.VLLM
    stage, unsized_layers = _stage_elements(model, rules, targets, rank, tp, pp, fully_sharded)
    slot_bytes = slots * stage * dtype_bytes
    metadata = 0
    if rules.punica_metadata:  # punica_base.py: 4 x tokens + 3 x seqs longs; punica_gpu.py: two LoRAKernelMeta
        seqs = max_num_seqs or 0
        meta = 2 * max_num_batched_tokens + (slots + 1) * 2 + slots + 2
        metadata = (4 * max_num_batched_tokens + 3 * seqs) * _INDEX_BYTES + 2 * meta * _META_BYTES
    shrink = 2 * max_num_batched_tokens * rank * _FP32_BYTES if rules.profiles_shrink_buffer else 0
    # an adapter in host memory is its own A and B per module, whole (the workers load unsharded checkpoints)
    adapter = replace(rules, head_b_split_by_tp=False, sglang_pools=False)
    whole, _ = _stage_elements(model, adapter, targets, rank, 1, 1, False)
    cpu_adapters = max(spec.max_cpu_loras or slots, slots)
    host = cpu_adapters * whole * dtype_bytes
    shown = sorted(t for t in targets if t is not LoraTarget.ROUTER or model.num_experts)
    notes = [
        f"LoRA: {slots} adapter slot(s) of rank {rank} on {', '.join(shown)}: "
        f"{slot_bytes / GIB:.3f} GiB per GPU, counted with the weights (before the KV cache)"
        + (f" (+ {metadata / GIB:.4f} GiB punica metadata)" if metadata else "")
        + f"; {cpu_adapters} adapter(s) in host memory: {host / GIB:.3f} GiB per GPU worker"
    ]
    if not rules.rank_stated_by_default and spec.max_lora_rank is None:
        notes.append(f"LoRA rank assumed {rank} (the engine reads it from the adapters; give --max-lora-rank)")
    if not rules.wraps_every_module and not spec.target_modules:
        notes.append("LoRA targets assumed q/k/v/o and gate/up/down (the engine reads them from the adapters)")
    if unsized_layers:
        notes.append(f"LoRA on the token mixers of {unsized_layers} MLA/SSM layer(s) is not sized (their projections)")
    reason = None
    if not rules.read_from_source:
        reason = (
            f"{engine.value}'s LoRA memory was not read from an engine's source: the adapter slots are charged by "
            "the per-slot rule of vLLM and SGLang as an estimate"
        )
    return LoraMemory(slots, rank, dtype_bytes, slot_bytes, metadata, shrink, host, tuple(notes), reason)


def lora_graph_cases(spec: LoraSpec | None) -> int:
    """The CUDA-graph sets vLLM captures per batch size: with LoRA, one without adapters and one with
    max_loras + 1 active (v1/cudagraph_dispatcher.py `_get_lora_cases`, `cudagraph_specialize_lora` on by
    default, `specialize_active_lora` off: lora/utils.py get_captured_lora_counts), so its CUDA-graph
    estimate (gpu_model_runner.py profile_cudagraph_memory: the first capture plus a charge per further
    graph) counts twice the graphs. Read in 0.33; other engines do not read the inputs' count."""
    return 1 if spec is None else 2


def charge_lora(
    inputs: OverheadInputs,
    spec: LoraSpec | None,
    engine: Engine,
    weights: WeightsEstimate,
    overhead: Overhead,
    notes: list[str],
    free_bytes: int = 0,
) -> tuple[WeightsEstimate, Overhead, LoraMemory | None]:
    """The weights and overhead with `spec`'s adapters charged, as the engines charge them before the KV
    budget: the slots and metadata with the weights (vLLM allocates them inside `load_model`, so its "model
    loading" figure holds them), the profiling run's shrink buffer on the activation peak (a named term).
    `inputs`: the model, its layout and the profiled batch the overhead was sized for; `free_bytes`: the memory
    free after the weights (TensorRT-LLM's default PEFT cache takes a share). Notes appended."""
    if spec is None:
        return weights, overhead, None
    i = inputs
    memory = lora_memory(
        i.model, spec, engine, i.tp, i.pp, i.act_bytes, i.max_num_batched_tokens, i.max_num_seqs, free_bytes
    )
    notes.extend(memory.notes)
    weights = replace(weights, per_gpu_bytes=weights.per_gpu_bytes + memory.charged_bytes_per_gpu)
    if memory.shrink_buffer_bytes_per_gpu and overhead.activation_peak_bytes:
        shrink = memory.shrink_buffer_bytes_per_gpu
        overhead = replace(
            overhead,
            activation_peak_bytes=overhead.activation_peak_bytes + shrink,
            buffers=(*overhead.buffers, ("LoRA shrink buffer (float32, slices x tokens x rank)", shrink)),
        )
    return weights, overhead, memory
