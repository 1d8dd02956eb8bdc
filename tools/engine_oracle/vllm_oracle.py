"""vLLM 0.33's own KV-cache planning, run on plain-data cases: the engine-oracle runner.

Run with the oracle venv's interpreter (tools/engine_oracle/setup_venv.sh builds it), never with the
project venv: it imports vLLM. Reads one JSON document on stdin and prints one JSON document:

    {"cases": [CASE, ...], "batch_defaults": [GPU, ...]}  ->  {"vllm_version": ..., "cases": [...],
                                                                "batch_defaults": [...]}

CASE (every size per rank, after tensor parallelism):
    id                      any string, echoed back
    layers                  [{"kind": "full"|"sliding"|"chunked"|"mla"|"indexer"|"state"|"shared",
                              "num_kv_heads", "head_size", "head_size_v", "window",
                              "state_shapes": [[...], ...], "state_dtypes": ["bfloat16", ...],
                              "prefill_checkpoint_blocks": 0|1}, ...]   (one entry per decoder layer)
    model_dtype             "bfloat16" | "float16"        (what `auto` KV resolves to)
    kv_cache_dtype          "auto" | "fp8" | ...          (checked against vLLM's CacheDType list)
    quantization_config     the checkpoint's, where it has one: `auto` is resolved from it first, by vLLM's own
                            resolve_kv_cache_dtype_string (engine/arg_utils.py calls it before the CacheConfig)
    block_size              tokens per attention block (the backend's choice is the caller's input)
    align_mamba_block_size  true: raise the attention block size and pad the state page the way
                            Platform._align_hybrid_block_size does (kernel alignment given below)
    kernel_block_alignment  the backend's smallest kernel block (16 for FlashAttention / Triton)
    max_model_len, max_num_batched_tokens, max_num_seqs
    async_scheduling        bool (on by default on GPUs), use_v2_model_runner (default true on GPUs)
    pp                      pipeline stages; layers split with vLLM's get_pp_indices
    mamba_cache_mode        "none" | "align" (prefix caching on by default puts hybrids in align)
    disable_hybrid_kv_cache_manager   null: vLLM's GPU default (off, except chunked-local attention)
    available_memory_bytes  KV memory per worker (vLLM's `available_memory`)
    auto_fit                true: plan as with `--max-model-len -1` (max_model_len is the model's)
    auto_fit_limit          also report what `--max-model-len -1` would pick with this model limit

GPU (for get_batch_defaults): {"id", "memory_bytes", "name", "capability": [major, minor]}

Nothing here re-implements a vLLM rule: specs are vLLM's own classes, planning is vLLM's own
functions (kv_cache_planning.get_global_kv_cache_groups / get_kv_cache_configs, kv_cache_utils
.get_kv_cache_capacity, EngineArgs.get_batch_defaults, VllmConfig.max_concurrent_batches). The
only inputs set by hand are those vLLM derives from a live GPU or a loaded model: the block size the
attention backend picks, the platform's hybrid-manager support, and the per-layer shapes.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import types
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")


import torch
import vllm
from vllm.config import CacheConfig, DeviceConfig, ParallelConfig, SchedulerConfig, VllmConfig
from vllm.config.cache import KV_CACHE_DTYPES
from vllm.distributed.utils import get_pp_indices
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform
from vllm.usage.usage_lib import UsageContext
from vllm.utils.math_utils import cdiv
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
from vllm.v1.core import kv_cache_planning as planning
from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    SparseCacheRole,
    UniformTypeKVCacheSpecs,
    get_kv_quant_mode,
)

logging.getLogger("vllm").setLevel(logging.ERROR)
# The reply is the last stdout line, after this marker: vLLM may print on stdout while importing.
MARKER = "@@vllm-oracle@@ "


def _torch_dtype(name: str) -> Any:
    return STR_DTYPE_TO_TORCH_DTYPE[name]


def _kv_dtype(case: dict[str, Any]) -> Any:
    kv = case.get("kv_cache_dtype", "auto")
    return _torch_dtype(case["model_dtype"] if kv == "auto" else kv)


def _layer_spec(layer: dict[str, Any], case: dict[str, Any], config: Any, state: dict[str, Any]) -> Any:
    block_size = config.cache_config.block_size
    kind = layer["kind"]
    kv = case.get("kv_cache_dtype", "auto")
    common = {
        "block_size": block_size,
        "num_kv_heads": layer.get("num_kv_heads", 1),
        "head_size": layer["head_size"] if kind != "state" else 0,
        "dtype": _kv_dtype(case),
        "kv_quant_mode": get_kv_quant_mode(kv),
    }
    if kind == "full":
        return FullAttentionSpec(head_size_v=layer.get("head_size_v", layer["head_size"]), **common)
    if kind == "sliding":
        return SlidingWindowSpec(
            head_size_v=layer.get("head_size_v", layer["head_size"]), sliding_window=layer["window"], **common
        )
    if kind == "chunked":
        return ChunkedLocalAttentionSpec(
            head_size_v=layer.get("head_size_v", layer["head_size"]), attention_chunk_size=layer["window"], **common
        )
    if kind == "mla":
        return MLAAttentionSpec(cache_dtype_str=kv, **{**common, "num_kv_heads": 1})
    if kind == "indexer":
        # DeepseekV32IndexerCache.get_kv_cache_spec: one uint8 vector per token, never TP-split.
        return MLAAttentionSpec(
            block_size=block_size,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=layer["head_size"],
            dtype=torch.uint8,
            cache_role=SparseCacheRole.INDEXER,
        )
    if kind == "state":
        # MambaBase.get_kv_cache_spec (model_executor/layers/mamba/abstract.py)
        cache = config.cache_config
        return MambaSpec(
            shapes=state["shapes"],
            dtypes=state["dtypes"],
            block_size=cache.mamba_block_size,
            page_size_padded=cache.mamba_page_size_padded,
            mamba_cache_mode=cache.mamba_cache_mode,
            num_prefill_checkpoint_blocks=layer.get("prefill_checkpoint_blocks", 0),
            prefill_checkpoint_alignment=case.get("prefill_checkpoint_alignment"),
        )
    raise ValueError(f"unknown layer kind {kind!r}")


# Architectures whose module does not import on a CPU venv (qwen3_5.py imports torchvision), and a
# class whose state-shape and state-dtype classmethods make the same calls:
# Qwen3_5ForCausalLMBase.get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config and
# Qwen3NextForCausalLM's are both MambaStateShapeCalculator.gated_delta_net_state_shape(tp,
# linear_num_key_heads, linear_num_value_heads, linear_key_head_dim, linear_value_head_dim,
# linear_conv_kernel_dim, num_spec) and gated_delta_net_state_dtype on hf_text_config.
STATE_SHAPE_STAND_INS = {
    "Qwen3_5ForConditionalGeneration": "Qwen3NextForCausalLM",
    "Qwen3_5ForCausalLM": "Qwen3NextForCausalLM",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3NextForCausalLM",
    "Qwen3_5MoeForCausalLM": "Qwen3NextForCausalLM",
}


class _StateModel:
    """Stands in for the model class where vLLM asks one for its state shapes (the alignment
    step resolves the architecture through ModelRegistry)."""

    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[Any, ...] = ()

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: Any) -> tuple[tuple[int, ...], ...]:
        return cls.shapes

    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: Any) -> tuple[Any, ...]:
        return cls.dtypes


def _model_stub(case: dict[str, Any], max_model_len: int) -> types.SimpleNamespace:
    attn = [layer for layer in case["layers"] if layer["kind"] in ("full", "sliding", "chunked", "mla")]
    first = attn[0] if attn else {"num_kv_heads": 1, "head_size": 0}
    hf = None
    if case.get("hf_config") is not None:
        from transformers import PretrainedConfig

        hf = PretrainedConfig(**case["hf_config"])
    return types.SimpleNamespace(
        max_model_len=max_model_len,
        original_max_model_len=-1 if case.get("auto_fit") else max_model_len,
        supports_kv_cache_grouping=False,
        hf_config=hf,
        hf_text_config=hf,
        dtype=_torch_dtype(case["model_dtype"]),
        architecture=case.get("architecture", "unknown"),
        model_impl="auto",
        runner_type="generate",
        convert_type="none",
        use_mla=first["kind"] == "mla",
        is_hybrid=any(layer["kind"] == "state" for layer in case["layers"]),
        get_num_kv_heads=lambda parallel_config: first.get("num_kv_heads", 1),
        get_head_size=lambda: first["head_size"],
    )


def _state_spec(case: dict[str, Any], config: Any) -> dict[str, Any]:
    """The state layers' shapes, dtypes and cache mode as vLLM derives them.

    With the model's config.json (`hf_config`) and `architecture`: the model class's own
    get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config, after the
    architecture's verify_and_update_config hook (NemotronH's fp32 SSM default) and
    HybridAttentionMambaModelConfig (prefix caching on -> mamba_cache_mode "align"). Without them,
    or where the model module does not import on a CPU, the shapes given in the case."""
    info: dict[str, Any] = {"source": "case"}
    states = [layer for layer in case["layers"] if layer["kind"] == "state"]
    if not states:
        return info
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP, HybridAttentionMambaModelConfig
    from vllm.model_executor.models.registry import ModelRegistry

    info["shapes"] = tuple(tuple(s) for s in states[0]["state_shapes"])
    info["dtypes"] = tuple(_torch_dtype(d) for d in states[0]["state_dtypes"])
    model_cls = None
    if config.model_config.hf_config is not None:
        arch = case["architecture"]
        for candidate in (arch, STATE_SHAPE_STAND_INS.get(arch)):
            if candidate is None:
                continue
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    model_cls, _ = ModelRegistry.resolve_model_cls(candidate, model_config=config.model_config)
                break
            except Exception as exc:  # the model module needs a package a CPU venv lacks
                info["source"] = f"case (vLLM {candidate} not importable: {_first_error_line(exc)[:120]})"
        hook = MODELS_CONFIG_MAP.get(arch)
        if hook is not None:
            hook.verify_and_update_config(config)
    # prefix caching (on by default) -> mamba_cache_mode "align", mamba_block_size = block_size
    HybridAttentionMambaModelConfig.verify_and_update_config(config)
    if model_cls is None:
        return info
    info["shapes"] = tuple(tuple(s) for s in model_cls.get_mamba_state_shape_from_config(config))
    info["dtypes"] = tuple(model_cls.get_mamba_state_dtype_from_config(config))
    info["source"] = f"vllm {model_cls.__name__}"
    return info


def _align_hybrid(case: dict[str, Any], config: Any, state: dict[str, Any]) -> None:
    """Platform._align_hybrid_block_size, vLLM's own, with the backend and the checkpoint
    alignment a GPU would report given as case inputs."""
    if "shapes" not in state or not any(layer["kind"] != "state" for layer in case["layers"]):
        return
    import vllm.model_executor.layers.mamba.abstract as mamba_abstract
    from vllm.model_executor.models.registry import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    _StateModel.shapes = state["shapes"]
    _StateModel.dtypes = state["dtypes"]

    class _GpuPlatform(Platform):
        @classmethod
        def _find_non_ssm_backends(cls, vllm_config: Any) -> list[Any]:
            return [FlashAttentionBackend]

    alignment = case.get("prefill_checkpoint_alignment")
    saved_resolve = ModelRegistry.resolve_model_cls
    saved_alignment = mamba_abstract.get_mamba_prefill_checkpoint_alignment
    try:
        ModelRegistry.resolve_model_cls = lambda *a, **k: (_StateModel, case.get("architecture", ""))  # type: ignore[method-assign]
        mamba_abstract.get_mamba_prefill_checkpoint_alignment = lambda vllm_config: alignment
        with contextlib.redirect_stdout(sys.stderr):
            _GpuPlatform._align_hybrid_block_size(config, FlashAttentionBackend)
    finally:
        ModelRegistry.resolve_model_cls = saved_resolve  # type: ignore[method-assign]
        mamba_abstract.get_mamba_prefill_checkpoint_alignment = saved_alignment


def _vllm_config(case: dict[str, Any], block_size: int, max_model_len: int) -> Any:
    sched = SchedulerConfig(
        max_num_batched_tokens=int(case["max_num_batched_tokens"]),
        max_num_seqs=int(case.get("max_num_seqs", 256)),
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        async_scheduling=bool(case.get("async_scheduling", True)),
    )
    cache = CacheConfig(block_size=block_size, cache_dtype=case.get("kv_cache_dtype", "auto"))
    cache.kv_cache_layout = case.get("kv_cache_layout", "LBNHC")
    if case.get("mamba_cache_mode") is not None:
        cache.mamba_cache_mode = case["mamba_cache_mode"]
    if not case.get("enable_prefix_caching", True):
        cache.enable_prefix_caching = False
    parallel = ParallelConfig(
        tensor_parallel_size=int(case.get("tp", 1)), pipeline_parallel_size=int(case.get("pp", 1))
    )
    with contextlib.redirect_stdout(sys.stderr):
        config = VllmConfig(
            device_config=DeviceConfig(device="cpu"),
            scheduler_config=sched,
            cache_config=cache,
            parallel_config=parallel,
        )
    # The CPU platform turns the hybrid manager off; a GPU platform leaves the choice to the gate.
    config.scheduler_config.disable_hybrid_kv_cache_manager = _disable_hybrid(case)
    # The planner reads the model config; no model is loaded here, a stub answers.
    object.__setattr__(config, "model_config", _model_stub(case, max_model_len))
    return config


def _disable_hybrid(case: dict[str, Any]) -> bool:
    """VllmConfig.__post_init__ on a GPU: the hybrid manager stays on unless the model has
    chunked-local attention (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE unset)."""
    explicit = case.get("disable_hybrid_kv_cache_manager")
    if explicit is not None:
        return bool(explicit)
    return any(layer["kind"] == "chunked" for layer in case["layers"])


def _group_kind(spec: Any) -> str:
    first = spec.first_spec if isinstance(spec, UniformTypeKVCacheSpecs) else spec
    if isinstance(first, MambaSpec):
        return "state"
    if isinstance(first, MLAAttentionSpec):
        return "indexer" if first.cache_role == SparseCacheRole.INDEXER else "mla"
    if isinstance(first, SlidingWindowSpec):
        return "sliding"
    if isinstance(first, ChunkedLocalAttentionSpec):
        return "chunked"
    return "full"


def _first_error_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": case.get("id")}
    if case.get("quantization_config") is not None:
        from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

        hf_config = types.SimpleNamespace(quantization_config=case["quantization_config"])
        checkpoint = types.SimpleNamespace(hf_config=hf_config)
        case = {**case, "kv_cache_dtype": resolve_kv_cache_dtype_string(case.get("kv_cache_dtype", "auto"), checkpoint)}
    kv = case.get("kv_cache_dtype", "auto")
    out["kv_cache_dtype_accepted"] = kv in KV_CACHE_DTYPES
    if not out["kv_cache_dtype_accepted"]:
        out["starts"] = False
        out["error"] = f"kv_cache_dtype {kv!r} is not one of vLLM's CacheDType values"
        return out
    max_model_len = int(case["max_model_len"])
    config = _vllm_config(case, int(case["block_size"]), max_model_len)
    state = _state_spec(case, config)
    _align_hybrid(case, config, state)
    out["block_size"] = config.cache_config.block_size
    out["mamba_cache_mode"] = config.cache_config.mamba_cache_mode
    out["mamba_page_size_padded"] = config.cache_config.mamba_page_size_padded
    if state.get("shapes"):
        out["state_source"] = state["source"]
        out["state_shapes"] = [list(shape) for shape in state["shapes"]]
        out["state_dtypes"] = [str(d).removeprefix("torch.") for d in state["dtypes"]]
        out["state_page_size_bytes"] = MambaSpec(
            shapes=state["shapes"], dtypes=state["dtypes"], block_size=-1
        ).page_size_bytes
    out["max_concurrent_batches"] = config.max_concurrent_batches
    out["max_in_flight_tokens"] = config.max_in_flight_tokens
    out["disable_hybrid_kv_cache_manager"] = config.scheduler_config.disable_hybrid_kv_cache_manager

    layers = case["layers"]
    pp = int(case.get("pp", 1))
    workers: list[dict[str, Any]] = []
    for rank in range(pp):
        start, end = get_pp_indices(len(layers), rank, pp)
        workers.append(
            {
                f"model.layers.{i}.attn": _layer_spec(layers[i], case, config, state)
                for i in range(start, end)
                if layers[i]["kind"] != "shared"  # reads another layer's cache: no spec of its own
            }
        )
    available = case["available_memory_bytes"]
    memory = [int(available)] * pp if not isinstance(available, list) else [int(a) for a in available]

    groups = planning.get_global_kv_cache_groups(config, workers)
    out["groups"] = [
        {
            "kind": _group_kind(g.kv_cache_spec),
            "num_layers": len(g.layer_names),
            "block_size": g.kv_cache_spec.block_size,
            "page_size_bytes": g.kv_cache_spec.page_size_bytes,
        }
        for g in groups
    ]
    builder = get_kv_cache_config_builder(config)
    projected = [planning._project_kv_cache_groups_to_worker(groups, w) for w in workers]
    # each stage's share of the global groups (a group with no layer on a stage stays, empty)
    out["worker_groups"] = [
        [{"kind": _group_kind(g.kv_cache_spec), "num_layers": len(g.layer_names)} for g in worker_groups]
        for worker_groups in projected
    ]
    try:
        configs = planning.get_kv_cache_configs(config, workers, memory, groups)
    except ValueError as exc:  # vLLM refuses to start: the start check, or a layout it cannot build
        out["starts"] = False
        out["error"] = _first_error_line(exc)
        try:
            # _estimate_max_model_len_from_groups against the pool less the null block, as the
            # start check's message quotes it (0: not one token)
            out["max_model_len_that_starts"] = min(
                planning._estimate_max_model_len_from_groups(
                    builder, config, g, m - planning._pool_bytes_per_block_from_builder(builder, config, g)
                )
                for g, m in zip(projected, memory, strict=True)
                if g
            )
        except ValueError:
            out["max_model_len_that_starts"] = None
        return out
    out["bytes_per_block"] = [planning._pool_bytes_per_block_from_builder(builder, config, g) for g in projected if g]
    out["starts"] = True
    out["error"] = None
    out["max_model_len"] = config.model_config.max_model_len  # after auto-fit, if asked
    if case.get("auto_fit_limit"):
        out["auto_fit_max_model_len"] = _auto_fit(case, config, builder, projected, memory)
    kv_config = configs[0]
    out["num_blocks"] = kv_config.num_blocks
    out["blocks_per_request"] = [
        cdiv(g.kv_cache_spec.max_memory_usage_bytes(config), g.kv_cache_spec.page_size_bytes)
        for g in kv_config.kv_cache_groups
    ]
    tokens, concurrency = get_kv_cache_capacity(config, kv_config)
    out["max_concurrency"] = concurrency
    out["kv_cache_size_tokens"] = tokens
    return out


def _auto_fit(case: dict[str, Any], config: Any, builder: Any, projected: list[Any], memory: list[int]) -> int | None:
    """What `--max-model-len -1` would run with, the model's limit being `auto_fit_limit`:
    planning._auto_fit_max_model_len against the pool less the null block, as get_kv_cache_configs
    calls it."""
    model = config.model_config
    saved = model.max_model_len, model.original_max_model_len
    model.max_model_len, model.original_max_model_len = int(case["auto_fit_limit"]), -1
    check_memory = [
        m - planning._pool_bytes_per_block_from_builder(builder, config, g) if g else m
        for g, m in zip(projected, memory, strict=True)
    ]
    try:
        planning._auto_fit_max_model_len(builder, config, projected, check_memory)
        return int(model.max_model_len)
    except ValueError:
        return None
    finally:
        model.max_model_len, model.original_max_model_len = saved


def batch_defaults(gpu: dict[str, Any]) -> dict[str, Any]:
    """EngineArgs.get_batch_defaults with the platform answering for the given GPU."""
    platform = current_platform
    capability = tuple(gpu.get("capability") or (9, 0))
    patched = {
        "get_device_total_memory": lambda device_id=0: int(gpu["memory_bytes"]),
        "get_device_name": lambda device_id=0: str(gpu["name"]),
        "is_device_capability": lambda cap, device_id=0: tuple(cap) == capability,
        "is_tpu": lambda: False,
    }
    saved = {name: platform.__dict__.get(name) for name in patched}
    try:
        for name, fn in patched.items():
            setattr(platform, name, fn)
        tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
    finally:
        for name, old in saved.items():
            if old is None:
                with contextlib.suppress(AttributeError):
                    delattr(platform, name)
            else:
                setattr(platform, name, old)
    usage = UsageContext
    return {
        "id": gpu.get("id"),
        "api_server_max_num_batched_tokens": tokens[usage.OPENAI_API_SERVER],
        "llm_class_max_num_batched_tokens": tokens[usage.LLM_CLASS],
        "max_num_seqs": seqs[usage.OPENAI_API_SERVER],
    }


def sglang_defaults(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SGLang 0.5.23's own `arg_groups/memory_hook.py handle_gpu_memory_settings` (after
    `cuda_graph_hook.handle_cuda_graph_config`, as `run_resolution_pipeline` orders them) for a text,
    non-MLA model (`model_path="dummy"`), the GPU's `nvidia-smi` memory.total given in MiB, the
    platform answering as CUDA.

    Two questions SGLang answers from the model config are answered here instead, because
    `sglang.srt.configs` imports torchvision, which has no build for the local CPU torch on the
    package index: `use_mla_backend` (False) and `model_config_of(...).is_multimodal` (False)."""
    if not rows:
        return []
    import sglang
    import sglang.srt.arg_groups.memory_hook as memory_hook
    import sglang.srt.arg_groups.overrides as overrides
    import sglang.srt.utils as sglang_utils
    from sglang.srt.arg_groups.cuda_graph_hook import handle_cuda_graph_config
    from sglang.srt.server_args import ServerArgs

    text_model = types.SimpleNamespace(is_multimodal=False)
    out = []
    for row in rows:
        mla = bool(row.get("mla", False))
        for module in (memory_hook, overrides):
            module.use_mla_backend = lambda server_args, mla=mla: mla  # type: ignore[attr-defined]
            module.model_config_of = lambda server_args: text_model  # type: ignore[attr-defined]
        mib = float(row["memory_mib"])
        memory_hook.get_device_memory_capacity = lambda device=None, mib=mib: mib  # type: ignore[attr-defined]
        # A row may ask for DP attention (`attn_dp`: --attn-dp-size, what --dp-size N --enable-dp-attention
        # becomes) and for prefill graphs stated "breakable" (`prefill_breakable`: as a CUDA host resolves them
        # by default; stated, the CPU host's cascade leaves them on, so the reserve is a CUDA host's).
        extra: dict[str, Any] = {}
        if int(row.get("attn_dp", 1)) > 1:
            extra["attn_dp_size"] = int(row["attn_dp"])
        if row.get("prefill_breakable"):
            extra["cuda_graph_backend_prefill"] = "breakable"
        if row.get("disable_cuda_graph"):  # --disable-cuda-graph: both phases' backends disabled
            extra["disable_cuda_graph"] = True
        if row.get("max_running_requests"):
            extra["max_running_requests"] = int(row["max_running_requests"])
        if row.get("cuda_graph_max_bs_decode"):
            extra["cuda_graph_max_bs_decode"] = int(row["cuda_graph_max_bs_decode"])
        # The platform answers as CUDA while the record is built: prefill CUDA graphs default to
        # "breakable" there (model_executor/cuda_graph_config.py default_prefill_backend), else "disabled".
        saved_is_cuda = sglang_utils.is_cuda
        sglang_utils.is_cuda = lambda: True
        try:
            args = ServerArgs(
                model_path="dummy",
                tp_size=int(row.get("tp", 1)),
                pp_size=int(row.get("pp", 1)),
                device="cuda",
                **extra,
            )
        finally:
            sglang_utils.is_cuda = saved_is_cuda
        # On this CPU host handle_cuda_graph_config disables prefill graphs again (a CUDA host keeps
        # "breakable" and reserves len(prefill sizes) x 8 MiB more): reported, for the caller to judge.
        handle_cuda_graph_config(args)
        memory_hook.handle_gpu_memory_settings(args)
        cfg = overrides.resolving_view(args)
        out.append(
            {
                "id": row.get("id"),
                "sglang_version": sglang.__version__,
                "chunked_prefill_size": cfg.chunked_prefill_size,
                "mem_fraction_static": cfg.mem_fraction_static,
                "decode_cuda_graph_max_bs": cfg.cuda_graph_config.decode.max_bs,
                "prefill_cuda_graph_backend": str(cfg.cuda_graph_config.prefill.backend),
                "prefill_cuda_graph_sizes": len(cfg.cuda_graph_config.prefill.bs or []),
            }
        )
    return out


def main() -> int:
    request = json.load(sys.stdin)
    results = []
    for case in request.get("cases", []):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                results.append(run_case(case))
        except Exception as exc:  # one broken case must not hide the others
            results.append({"id": case.get("id"), "oracle_error": _first_error_line(exc)})
    defaults = [batch_defaults(gpu) for gpu in request.get("batch_defaults", [])]
    try:
        with contextlib.redirect_stdout(sys.stderr):
            sglang = sglang_defaults(request.get("sglang_defaults", []))
    except Exception as exc:  # SGLang is optional: report why instead of failing the vLLM answers
        sglang = [{"sglang_error": _first_error_line(exc)}]
    dtypes = {dtype: dtype in KV_CACHE_DTYPES for dtype in request.get("kv_cache_dtypes", [])}
    reply = {
        "vllm_version": vllm.__version__,
        "cases": results,
        "batch_defaults": defaults,
        "kv_cache_dtypes_accepted": dtypes,
        "sglang_defaults": sglang,
    }
    sys.stdout.write(MARKER + json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
