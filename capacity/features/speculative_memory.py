"""What speculative decoding takes on the GPU, per engine and release (read in vLLM 0.33.0 and SGLang 0.5.23):
the draft's weights on every rank and the draft's KV in the same pool.

- vLLM 0.33 (`v1/spec_decode/llm_base_proposer.py:load_model`): the drafter's attention layers are built in
  the target's forward context, so `GPUModelRunner.get_kv_cache_spec` lists them beside the target's and the
  KV cache groups hold them: each cached token costs the draft's layers too, in the draft's own shapes, in
  one pool. EAGLE heads and MTP layers share the target's embedding and lm_head (`_maybe_share_embeddings`,
  `_maybe_share_lm_head`; EAGLE-3 keeps its own head over its draft vocabulary); a draft model shares
  nothing (`draft_model.py`) and must run at the target's TP (`_raise_if_draft_tp_mismatch`).
- SGLang 0.5.23 (`model_executor/pool_configurator.py`, EAGLE / STANDALONE): the draft worker has its own KV
  pool indexed like the target's, so both hold the same number of tokens; the target's cell size grows by
  `cell_size * draft_layers / num_layers` -- the draft's layers at the target's per-layer size ("assumes the
  draft shares the target's per-layer KV size"), draft_layers = num_nextn_predict_layers for MTP, else the
  draft config's num_hidden_layers (`spec_aux_hidden_state.py`). Without --max-running-requests speculative
  decoding caps the running requests at 48 (`arg_groups/speculative_hook.py:_handle_eagle_family`).
- ngram and suffix decoding put nothing on the GPU; Medusa heads are weights without KV.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from capacity.engines.kinds import Engine
from capacity.features.speculative import SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS, DraftShape, SpecMethod
from capacity.kv.kinds import LayerCache
from capacity.spec import DeploymentSpec, LayerKVSpec, ModelSpec, SpecError
from capacity.weights import WeightsEstimate, weight_format

# engines whose draft still holds its own embedding / lm_head copies when the target's KV pool is sized: SGLang
# 0.5.23 loads the draft worker before `Scheduler.init_memory_pools` and swaps in the target's embedding and head
# only after (`speculative/eagle_worker_v2.py` `alloc_memory_pool` -> `init_lm_head`; sglang#36452). vLLM swaps
# them inside `load_model` (`_maybe_share_embeddings`), before its profiling run measures the weights.
_COPIES_HELD_AT_SIZING = frozenset({Engine.SGLANG})


def draft_shape(draft: ModelSpec, method: SpecMethod, name: str) -> DraftShape:
    """A draft checkpoint (its parsed config) as vLLM 0.33 loads it beside the target: every parameter but the
    embedding / lm_head it shares (`SpecMethod.shares_*`), and for an EAGLE head what `llama_eagle.py` /
    `llama_eagle3.py` build beyond a Llama stack: the fc (`fc_inputs` x hidden -> hidden, a ReplicatedLinear,
    no bias); EAGLE-1 drops layer 0's input_layernorm and has no final norm; EAGLE-3's layer 0 projects
    q/k/v from 2 x hidden, adds a hidden_norm, and its lm_head spans `draft_vocab_size` (the parser's)."""
    h = draft.hidden_size
    shared = (draft.lm_head_params if method.shares_lm_head else 0) + (
        draft.embedding_params if method.shares_embeddings else 0
    )
    params = draft.total_params - shared
    if method is SpecMethod.EAGLE:
        params -= draft.final_norm_params + h
    elif method is SpecMethod.EAGLE3:
        params += h * (draft.num_attention_heads + 2 * draft.num_kv_heads) * draft.head_dim + h
    fmt = weight_format(draft, "auto")
    return DraftShape(
        name=name,
        layers=tuple(layer.cache for layer in draft.layers if layer.cache.stores_per_token_kv),
        params=params,
        weight_bytes_per_param=float(fmt.linear_bytes_per_param),
        hidden_size=h,
        num_attention_heads=draft.num_attention_heads,
        replicated_params=method.fc_inputs * h * h,
        shared_params=shared,
        shared_bytes_per_param=float(fmt.dense_bytes_per_param),
    )


def _attention_cache(target: ModelSpec) -> LayerCache:
    """The target's last layer that keeps every token (an MTP layer is a full-attention / MLA decoder layer)."""
    for layer in reversed(target.layers):
        if layer.cache.stores_per_token_kv and layer.cache.window is None:
            return layer.cache
    return target.layers[-1].cache


def _embedding_and_head(target: ModelSpec) -> int:
    """One embedding and one lm_head of the target's vocabulary and width: the copies an MTP or EAGLE draft
    module builds before the engine swaps in the target's."""
    return target.embedding_params + (target.lm_head_params or target.embedding_params)


def mtp_shape(target: ModelSpec, weight_dtype: str, engine: Engine) -> DraftShape:
    """The target's own MTP layers as the draft: `num_nextn_predict_layers` decoder layers of the target's
    attention shape, at the target's weight format. A config that does not state them (Qwen3-Next) runs one:
    vLLM's MTP models read `num_nextn_predict_layers` with a default of 1 (`qwen3_next_mtp.py`); then the layer
    is the target's largest plus the fc (2h -> h) and its norms, and the notes say so."""
    fmt = weight_format(target, weight_dtype, engine)
    h = target.hidden_size
    stated = target.mtp_layers > 0
    largest = max((p.total for p in target.layer_params), default=0)
    return DraftShape(
        name="the model's MTP layers",
        layers=(_attention_cache(target),) * (target.mtp_layers if stated else 1),
        params=target.mtp_params if stated else largest + 2 * h * h + 3 * h,
        weight_bytes_per_param=float(fmt.linear_bytes_per_param),
        hidden_size=h,
        num_attention_heads=target.num_attention_heads,
        shared_params=_embedding_and_head(target),
        shared_bytes_per_param=float(fmt.dense_bytes_per_param),
        assumed=None
        if stated
        else (
            "the config states no MTP layers (num_nextn_predict_layers / mtp_num_hidden_layers): one assumed, "
            "vLLM's default, of the model's largest decoder layer plus its fc"
        ),
    )


def assumed_shape(target: ModelSpec, method: SpecMethod, name: str) -> DraftShape:
    """A draft whose config is not in the catalog: one decoder layer of the target's shape with an EAGLE
    head's fc (what an EAGLE / EAGLE-3 head is); said in the notes, never refused."""
    layer = max(target.layer_params, key=lambda p: p.total, default=None)
    layer_params = layer.total - layer.experts - layer.router if layer is not None else 0
    h = target.hidden_size
    return DraftShape(
        name=name,
        layers=(_attention_cache(target),) if method.has_kv else (),
        params=layer_params,
        weight_bytes_per_param=2.0,
        hidden_size=h,
        num_attention_heads=target.num_attention_heads,
        replicated_params=max(method.fc_inputs, 2) * h * h,
        shared_params=_embedding_and_head(target) if method.shares_embeddings else 0,
        assumed=(
            f"draft {name!r} is not in the catalog: assumed one decoder layer of the target's shape plus an "
            "EAGLE fc, in bf16 (give its config with a catalog entry to size it)"
        ),
    )


@dataclass(frozen=True, slots=True)
class DraftSizing:
    """What the estimate takes from a deployment's speculative decoding: the model whose layers the KV pool
    holds (the target's plus the draft's), the draft's weight bytes on each GPU, the engine's default cap on
    running sequences, and the draft used for speed."""

    pool_model: ModelSpec
    weight_bytes_per_gpu: int = 0
    default_max_num_seqs: int | None = None
    draft: DraftShape | None = None

    def with_weights(self, weights: WeightsEstimate) -> WeightsEstimate:
        """The target's weights plus the draft's (every rank holds its shard of the draft)."""
        if not self.weight_bytes_per_gpu:
            return weights
        per_gpu = weights.per_gpu_bytes + self.weight_bytes_per_gpu
        return replace(weights, per_gpu_bytes=per_gpu, total_bytes=weights.total_bytes + self.weight_bytes_per_gpu)


def resolved_draft(target: ModelSpec, d: DeploymentSpec, engine: Engine) -> DraftShape | None:
    """The draft of the deployment's speculative decoding: the resolved checkpoint, the target's MTP layers,
    or an assumed EAGLE-sized head (None where the method has no draft network)."""
    spec = d.speculative
    if spec is None or not spec.method.has_weights:
        return None
    if spec.method is SpecMethod.MTP:
        return mtp_shape(target, d.weight_dtype, engine)
    if spec.draft is not None:
        return spec.draft
    return assumed_shape(target, spec.method, spec.draft_model or spec.method.value)


def draft_weight_bytes_per_gpu(draft: DraftShape, d: DeploymentSpec, engine: Engine) -> int:
    """The draft's weights on each GPU when the engine sizes its KV pool (at the draft's TP, else the target's)."""
    tp = (d.speculative.draft_tp if d.speculative is not None else None) or d.tp
    return draft.weight_bytes_per_gpu(tp, with_shared_copies=engine in _COPIES_HELD_AT_SIZING)


def draft_kv_layers(target: ModelSpec, draft: DraftShape, engine: Engine) -> tuple[LayerCache, ...]:
    """The cache layers the draft adds to the pool: vLLM the draft's own; SGLang as many layers of the
    target's per-layer size (`pool_configurator.py`)."""
    if engine is Engine.SGLANG:
        return (_attention_cache(target),) * len(draft.layers)
    return draft.layers


def with_draft_layers(target: ModelSpec, caches: tuple[LayerCache, ...]) -> ModelSpec:
    """The target with the draft's cache layers after its own (the last pipeline stage's, where the drafter
    runs): the model the KV pool is built from."""
    if not caches:
        return target
    start = max(target.num_layers, max((layer.index for layer in target.layers), default=-1) + 1)
    extra = tuple(LayerKVSpec(start + i, cache) for i, cache in enumerate(caches))
    return replace(target, layers=target.layers + extra, num_layers=start + len(caches))


def draft_sizing(target: ModelSpec, d: DeploymentSpec, engine: Engine, notes: list[str]) -> DraftSizing:
    """The deployment's speculative decoding sized for `engine` (nothing where none is declared); the draft,
    what it adds and what was assumed go in the notes. TensorRT-LLM's is refused with the reason."""
    spec = d.speculative
    if spec is None or spec.method is SpecMethod.UNKNOWN:
        return DraftSizing(target)
    if engine is Engine.TRTLLM:
        raise SpecError(
            "TensorRT-LLM's speculative decoding (speculative_config in --extra_llm_api_options) is not sized: a "
            "two-model draft keeps its own KV manager on the same budget and one-model MTP/EAGLE-3 layers join the "
            "target's cache with extra KV tokens per sequence (_torch/pyexecutor/_util.py KvCacheCreator."
            "_get_kv_size_per_token, _get_token_num_for_estimation), not read per release here; estimate vLLM or SGLang"
        )
    seqs = SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS if engine is Engine.SGLANG and d.max_num_seqs is None else None
    draft = resolved_draft(target, d, engine)
    if draft is None:
        notes.append(f"speculative decoding: {spec.describe}: no draft weights and no draft KV on the GPU")
        return DraftSizing(target, 0, seqs)
    draft_tp = spec.draft_tp or d.tp
    if engine is Engine.VLLM and spec.method is SpecMethod.DRAFT_MODEL and draft_tp != d.tp:
        raise SpecError(
            f"vLLM runs a draft model at the target's TP only (draft_tensor_parallel_size {draft_tp} != {d.tp}: "
            "v1/spec_decode/draft_model.py _raise_if_draft_tp_mismatch)"
        )
    weight_bytes = draft_weight_bytes_per_gpu(draft, d, engine)
    caches = draft_kv_layers(target, draft, engine)
    pool_model = with_draft_layers(target, caches)
    if draft.assumed:
        notes.append(draft.assumed)
    notes.append(
        f"speculative decoding: {spec.describe}: the draft ({draft.name}) adds {weight_bytes / 2**30:.2f} GiB of "
        f"weights per GPU and {len(caches)} KV layer(s) to every cached token"
        + (f"; SGLang caps running requests at {seqs} (--max-running-requests)" if seqs else "")
    )
    if d.pp > 1 and caches:
        notes.append("speculative decoding with PP > 1: the draft's layers are counted on the last stage")
    return DraftSizing(pool_model, weight_bytes, seqs, draft)
