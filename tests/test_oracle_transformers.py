"""Oracle: capplan's per-layer cache bytes and parameter counts against real transformers models.

Tiny random-weight models of every family are built on the CPU with transformers 5.24 (no
download). For each model, `parse_config(model.config.to_dict())` (so the parser reads what
transformers writes) is compared, layer by layer and exactly, with what the cache object holds
after a forward pass of T tokens:

* per-token layers: `numel * element_size` of the layer's keys and values (logical bytes, not the
  storage a prefill slice keeps alive) against `kv_elements_per_token * b * tokens`, where
  `tokens = min(T, W - 1)` for sliding/chunked layers (transformers keeps W - 1) and T otherwise;
* state layers (Mamba, gated delta-net): conv + recurrent state bytes against
  `conv_elements * b + recurrent_elements * bytes(mamba_ssm_cache_dtype)` (fp32 by default);
* shared layers (Gemma 4 KV sharing) and MLP-only layers hold nothing.

T is taken below and above the window (W = 16), in bf16 and fp32. Known difference, asserted as
such: Falcon `new_decoder_architecture` -- transformers expands K/V to all query heads before
caching (H * D_h per token), serving engines and capplan cache num_kv_heads (H_kv * D_h).

Parameter counts are compared too: every parameter of the tiny model (plus the persistent buffers
that ship in checkpoints: router correction biases, Gemma 4 layer scalars).

Run with the `oracle` extra installed: `pytest -m oracle`. Skipped without torch/transformers.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

from capacity.hf_config import parse_config
from capacity.kv.kinds import WINDOWED_KINDS
from capacity.spec import KVKind, ModelSpec
from tests.conftest import require_extra

require_extra("oracle", "torch", "transformers")
import torch  # noqa: E402
import transformers  # noqa: E402

pytestmark = pytest.mark.oracle

W = 16  # window / chunk size of every windowed tiny model
VOCAB = 256
HIDDEN = 128
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Case:
    id: str
    model_type: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    hf_kv_head_factor: int = 1  # transformers caches this many times capplan's KV (Falcon new arch)


def _base(**kwargs: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
    }
    cfg.update(kwargs)
    return cfg


_MOE = {"num_local_experts": 4, "num_experts_per_tok": 2}
_GATED_DELTA_NET = {  # Qwen3-Next / Qwen3.5 linear-attention layers
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 24,
}
_SHARED_EXPERT_MOE = {  # Qwen3-Next / Qwen3.5 MoE: routed experts beside a shared one
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
}
_ROUTED_MOE = {  # DeepSeek's names for routed experts (DeepSeek, GLM-4 MoE, Nemotron-H)
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
}
_MLA = {
    "num_hidden_layers": 3,
    "num_key_value_heads": 4,
    "kv_lora_rank": 32,
    "q_lora_rank": 48,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    **_ROUTED_MOE,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}

CASES = [
    Case("llama-mha", "llama", _base(num_key_value_heads=4)),
    Case("llama-gqa", "llama", _base(num_attention_heads=8, num_key_value_heads=2)),
    Case("llama-gqa-headdim", "llama", _base(num_attention_heads=8, num_key_value_heads=2, head_dim=48)),
    Case("llama-tied-bias", "llama", _base(attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    Case("mistral-swa", "mistral", _base(sliding_window=W)),
    Case("mistral-mqa-headdim", "mistral", _base(num_key_value_heads=1, head_dim=64, sliding_window=None)),
    Case("mixtral-moe", "mixtral", _base(sliding_window=None, **_MOE)),
    Case("mixtral-moe-swa", "mixtral", _base(sliding_window=W, **_MOE)),
    Case("qwen2-gqa", "qwen2", _base(num_attention_heads=8, num_key_value_heads=2)),
    Case(
        "qwen2-swa-upper",
        "qwen2",
        _base(num_attention_heads=8, use_sliding_window=True, sliding_window=W, max_window_layers=2),
    ),
    Case("qwen3-headdim", "qwen3", _base(head_dim=64)),
    Case(
        "qwen3-moe",
        "qwen3_moe",
        _base(
            head_dim=32,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            decoder_sparse_step=2,
            mlp_only_layers=[0],
        ),
    ),
    Case(
        "qwen3-next-hybrid",
        "qwen3_next",
        _base(
            head_dim=64,
            **_GATED_DELTA_NET,
            linear_conv_kernel_dim=4,
            **_SHARED_EXPERT_MOE,
        ),
    ),
    Case(
        "qwen3.5-dense-hybrid",
        "qwen3_5_text",
        _base(
            head_dim=32,
            **_GATED_DELTA_NET,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        ),
    ),
    Case("qwen3.5-moe-hybrid", "qwen3_5_moe_text", _base(head_dim=32, **_GATED_DELTA_NET, **_SHARED_EXPERT_MOE)),
    Case("gemma-mqa", "gemma", _base(num_key_value_heads=1, head_dim=32)),
    Case("gemma2-alt", "gemma2", _base(head_dim=64, sliding_window=W)),
    Case(
        "gemma3-5to1", "gemma3_text", _base(num_hidden_layers=6, num_key_value_heads=1, head_dim=64, sliding_window=W)
    ),
    Case(
        "gemma4-kvshare",
        "gemma4_text",
        _base(
            num_hidden_layers=6,
            head_dim=64,
            global_head_dim=128,
            attention_k_eq_v=True,
            num_global_key_value_heads=1,
            num_kv_shared_layers=2,
            sliding_window=W,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
            hidden_size_per_layer_input=16,
            vocab_size_per_layer_input=VOCAB,
            use_double_wide_mlp=True,
        ),
    ),
    Case(
        "gemma4-moe",
        "gemma4_text",
        _base(
            num_hidden_layers=3,
            head_dim=32,
            global_head_dim=64,
            sliding_window=W,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            hidden_size_per_layer_input=0,
            enable_moe_block=True,
            num_experts=4,
            top_k_experts=2,
            moe_intermediate_size=64,
        ),
    ),
    Case("phi3-mha", "phi3", _base(num_key_value_heads=4, pad_token_id=0)),
    Case("phi3-gqa-swa", "phi3", _base(num_attention_heads=8, sliding_window=W, pad_token_id=0)),
    Case("deepseek-v3-mla", "deepseek_v3", _base(**_MLA)),
    Case("deepseek-v2-mla", "deepseek_v2", _base(**{**_MLA, "q_lora_rank": None})),
    Case("glm4-moe-lite-mla", "glm4_moe_lite", _base(**{**_MLA, "v_head_dim": 48})),
    Case(
        "gpt-oss-alt",
        "gpt_oss",
        _base(head_dim=64, sliding_window=W, **_MOE, intermediate_size=128),
    ),
    Case("falcon-7b-mqa", "falcon", _base(multi_query=True, new_decoder_architecture=False)),
    Case(
        "falcon-40b-newarch",
        "falcon",
        _base(num_attention_heads=8, num_kv_heads=2, new_decoder_architecture=True),
        hf_kv_head_factor=4,  # HF caches all 8 query heads, engines 2
    ),
    Case(
        "jamba-hybrid",
        "jamba",
        _base(
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            num_experts=4,
            num_experts_per_tok=2,
            mamba_d_state=16,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_dt_rank=8,
        ),
    ),
    Case(
        "nemotron-h-hybrid",
        "nemotron_h",
        _base(
            layers_block_type=["linear_attention", "full_attention", "mlp", "moe"],
            head_dim=32,
            mamba_num_heads=8,
            mamba_head_dim=16,
            ssm_state_size=16,
            n_groups=2,
            conv_kernel=4,
            **_ROUTED_MOE,
            moe_shared_expert_intermediate_size=64,
        ),
    ),
    Case(
        "llama4-chunked",
        "llama4_text",
        _base(
            head_dim=32,
            attention_chunk_size=W,
            num_local_experts=4,
            num_experts_per_tok=1,
            intermediate_size=64,
            intermediate_size_mlp=256,
            interleave_moe_layer_step=2,
        ),
    ),
    Case("glm4", "glm4", _base(head_dim=32, pad_token_id=0)),
    Case(
        "glm4-moe",
        "glm4_moe",
        _base(head_dim=32, **_ROUTED_MOE, first_k_dense_replace=1, use_qk_norm=True, attention_bias=True),
    ),
    Case("minimax-m2", "minimax_m2", _base(head_dim=32, **_MOE)),
]


CASES_BY_ID = {case.id: case for case in CASES}


@functools.cache
def _model(case_id: str, dtype_name: str) -> Any:
    """Built once per (case, dtype) and shared by the cache and parameter tests (read-only use)."""
    return _build(CASES_BY_ID[case_id], getattr(torch, dtype_name))


def _build(case: Case, dtype: Any) -> Any:
    config = transformers.AutoConfig.for_model(case.model_type, **case.kwargs)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def _tensor_bytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    return 0


def _hf_layer_bytes(cache: Any) -> list[tuple[int, int]]:
    """(KV bytes, state bytes) per cache layer, logical (numel * element_size)."""
    out = []
    for layer in cache.layers:
        kv = _tensor_bytes(getattr(layer, "keys", None)) + _tensor_bytes(getattr(layer, "values", None))
        state = _tensor_bytes(getattr(layer, "conv_states", None)) + _tensor_bytes(
            getattr(layer, "recurrent_states", None)
        )
        out.append((kv, state))
    return out


def _capplan_layer_bytes(spec: ModelSpec, tokens: int, b: int) -> list[tuple[int, int]]:
    by_index = {layer.index: layer for layer in spec.layers}
    ssm_bytes = DTYPE_BYTES[spec.mamba_ssm_cache_dtype]
    out = []
    for i in range(spec.num_layers):
        layer = by_index.get(i)
        if layer is None or layer.kind is KVKind.SHARED:
            out.append((0, 0))
        elif layer.kind is KVKind.STATE:
            out.append((0, layer.cache.conv_state_elements * b + layer.cache.recurrent_state_elements * ssm_bytes))
        else:
            window = layer.cache.window
            held = min(tokens, window - 1) if layer.kind in WINDOWED_KINDS and window else tokens
            out.append((layer.cache.kv_elements_per_token * b * held, 0))
    return out


def _spec_of(model: Any) -> ModelSpec:
    return parse_config(model.config.to_dict(), name=model.config.model_type)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_cache_bytes_per_layer(case: Case, dtype_name: str) -> None:
    model = _model(case.id, dtype_name)
    spec = _spec_of(model)
    b = DTYPE_BYTES[dtype_name]
    generator = torch.Generator().manual_seed(0)
    for tokens in (W // 2, 40):  # below and above the window
        input_ids = torch.randint(0, VOCAB, (1, tokens), generator=generator)
        with torch.no_grad():
            output = model(input_ids=input_ids, use_cache=True)
        cache = getattr(output, "cache", None) or output.past_key_values
        measured = _hf_layer_bytes(cache)
        expected = _capplan_layer_bytes(spec, tokens, b)
        expected = [(kv * case.hf_kv_head_factor, state) for kv, state in expected]
        # a cache may stop at the last layer that stores anything; missing layers hold nothing
        measured += [(0, 0)] * (len(expected) - len(measured))
        assert measured == expected, f"{case.id} T={tokens} {dtype_name}"


def test_falcon_new_architecture_overcaching_is_the_documented_difference() -> None:
    model = _model("falcon-40b-newarch", "bfloat16")
    spec = _spec_of(model)
    heads, kv_heads, head_dim = 8, 2, HIDDEN // 8
    assert {layer.cache.num_kv_heads for layer in spec.layers} == {kv_heads}
    with torch.no_grad():
        output = model(input_ids=torch.zeros(1, 8, dtype=torch.long), use_cache=True)
    cache = getattr(output, "cache", None) or output.past_key_values
    per_layer = _hf_layer_bytes(cache)[0][0]
    assert per_layer == 2 * heads * head_dim * 2 * 8  # transformers: all query heads
    assert spec.layers[0].cache.kv_elements_per_token * 2 * 8 == 2 * kv_heads * head_dim * 2 * 8  # capplan


def _checkpoint_params(model: Any) -> int:
    """Parameters plus the persistent buffers that checkpoints ship (tied weights counted once)."""
    shipped = ("e_score_correction_bias", "layer_scalar")
    buffers = sum(b.numel() for name, b in model.named_buffers() if name.rsplit(".", 1)[-1] in shipped)
    return sum(p.numel() for p in model.parameters()) + buffers


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_parameter_count(case: Case) -> None:
    model = _model(case.id, "float32")
    spec = _spec_of(model)
    # extra_params here is either an MTP module transformers does not build (DeepSeek, GLM) or,
    # for Gemma 4, the per-layer embeddings, which it does build
    built_extra = spec.extra_params if spec.family == "gemma4" else 0
    assert spec.total_params - spec.extra_params + built_extra == _checkpoint_params(model)


# ------------------------------------------------- multimodal wrappers (nested text_config)

_TEXT = _base()
WRAPPERS: dict[str, dict[str, Any]] = {
    "gemma3": {
        "text_config": {
            **_TEXT,
            "model_type": "gemma3_text",
            "num_hidden_layers": 6,
            "head_dim": 64,
            "sliding_window": W,
        },
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 56,
            "patch_size": 14,
        },
        "mm_tokens_per_image": 4,
    },
    "llama4": {
        "text_config": {
            **_TEXT,
            "model_type": "llama4_text",
            "head_dim": 32,
            "attention_chunk_size": W,
            "num_local_experts": 4,
            "num_experts_per_tok": 1,
            "intermediate_size": 64,
            "intermediate_size_mlp": 256,
        },
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
            "vision_output_dim": 64,
            "projector_input_dim": 64,
            "projector_output_dim": 64,
            "pixel_shuffle_ratio": 0.5,
        },
    },
    "mistral3": {
        "text_config": {**_TEXT, "model_type": "mistral", "head_dim": 32, "sliding_window": None},
        "vision_config": {
            "model_type": "pixtral",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "head_dim": 16,
            "image_size": 56,
            "patch_size": 14,
        },
        "spatial_merge_size": 2,
        # transformers 5.24's Mistral3Config defaults to tied embeddings; the published checkpoints
        # (and vLLM, which reads the text config) have a separate lm_head: pin it explicitly here
        "tie_word_embeddings": False,
    },
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
def test_multimodal_wrapper_text_cache_and_vision_params(wrapper: str) -> None:
    config = transformers.AutoConfig.for_model(wrapper, **WRAPPERS[wrapper])
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16).eval()
    spec = parse_config(model.config.to_dict())
    assert spec.family == wrapper and spec.extra_params > 0  # the vision tower is counted
    assert spec.total_params == sum(p.numel() for p in model.parameters())
    if wrapper == "llama4":
        return  # Llama4ForConditionalGeneration.forward without pixel values fails in 5.24
    input_ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        output = model(input_ids=input_ids, use_cache=True)
    cache = getattr(output, "cache", None) or output.past_key_values
    assert _hf_layer_bytes(cache) == _capplan_layer_bytes(spec, 40, 2)
