"""config.json -> ModelSpec: per-layer KV layouts, context limits, dtypes and quantization of the
published configs under tests/configs/, the generic path, and the errors bad input must raise.

Expected numbers are worked out by hand from the config fields (arithmetic written in the test).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from capacity.hf_config import ConfigError, parse_config
from capacity.spec import KVKind, LayerKVSpec, ModelSpec
from tests.conftest import compressed_tensors_int4

CONFIGS = Path(__file__).parent / "configs"
BF16 = 2


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return data


def spec(name: str) -> ModelSpec:
    return parse_config(load(name), name=name)


def kv_elements_per_token(s: ModelSpec) -> int:
    return sum(layer.cache.kv_elements_per_token for layer in s.layers)


def kinds(s: ModelSpec) -> list[KVKind]:
    return [layer.kind for layer in s.layers]


def assert_uniform(s: ModelSpec, kind: KVKind, heads: int, k_dim: int, v_dim: int, window: int | None) -> None:
    assert [layer.index for layer in s.layers] == list(range(s.num_layers))
    for layer in s.layers:
        c = layer.cache.columns()  # the registry's reading (MLA: one latent "head", K = rank, V = rope)
        assert (layer.kind, c["num_kv_heads"], c["k_head_dim"], c["v_head_dim"], c["window_tokens"]) == (
            kind,
            heads,
            k_dim,
            v_dim,
            window,
        )


# ------------------------------------------------------------------------------ Llama


def test_llama_2_7b_mha_seed_check() -> None:
    s = spec("llama-llama-2-7b")
    assert (s.family, s.model_type, s.architecture) == ("llama", "llama", "LlamaForCausalLM")
    assert_uniform(s, KVKind.FULL, 32, 128, 128, None)  # MHA: H_kv = H = 32, D = 4096 / 32
    assert s.torch_dtype == "float16"
    # DESIGN seed check: L=32, H_kv=32, D_h=128, b=2 -> 524,288 B/token
    assert kv_elements_per_token(s) * 2 == 32 * 32 * (128 + 128) * 2 == 524_288
    assert s.context_limit_tokens == s.max_position_embeddings == 4096
    assert not s.is_generic and s.quantization is None


@pytest.mark.parametrize(
    ("name", "kv_heads", "context_tokens"),
    [("llama-meta-llama-3-8b", 8, 8192), ("phi3-phi-4", 10, 16_384)],
)
def test_full_attention_gqa_and_context(name: str, kv_heads: int, context_tokens: int) -> None:
    """Llama 3 8B, Phi-4: grouped KV heads of 128 on every layer, the context from max_position_embeddings."""
    s = spec(name)
    assert_uniform(s, KVKind.FULL, kv_heads, 128, 128, None)
    assert s.context_limit_tokens == context_tokens


def test_llama_3_1_8b_kv_and_llama3_rope() -> None:
    s = spec("llama-llama-3.1-8b")
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)
    # 32 layers * 8 heads * (128 + 128) = 65,536 elements = 131,072 bytes in bf16
    assert kv_elements_per_token(s) == 32 * 8 * (128 + 128) == 65_536
    assert kv_elements_per_token(s) * BF16 == 131_072
    assert s.torch_dtype == "bfloat16"
    # llama3 rope scaling is already folded into max_position_embeddings (vLLM skips it)
    assert s.context_limit_tokens == 131_072
    assert (s.num_attention_heads, s.num_kv_heads, s.head_dim) == (32, 8, 128)


def test_llama_3_1_70b_and_3_3() -> None:
    for name in ("llama-llama-3.1-70b", "llama-llama-3.3-70b-instruct"):
        s = spec(name)
        assert_uniform(s, KVKind.FULL, 8, 128, 128, None)
        assert kv_elements_per_token(s) == 80 * 8 * 256 == 163_840


def test_llama_3_2_1b_explicit_head_dim_and_tied() -> None:
    s = spec("llama-llama-3.2-1b")
    assert_uniform(s, KVKind.FULL, 8, 64, 64, None)  # head_dim 64 = 2048 / 32
    assert kv_elements_per_token(s) == 16 * 8 * 128 == 16_384
    assert s.tie_word_embeddings and s.lm_head_params == 0


# ---------------------------------------------------------------------- Mistral family


def test_mistral_7b_v0_1_sliding_every_layer() -> None:
    s = spec("mistral-mistral-7b-v0.1")
    assert s.family == "mistral"
    assert_uniform(s, KVKind.SLIDING, 8, 128, 128, 4096)
    assert kv_elements_per_token(s) == 32 * 8 * 256


def test_mistral_sliding_window_null_means_full() -> None:
    cfg = load("mistral-mistral-7b-v0.1")
    cfg["sliding_window"] = None
    assert_uniform(parse_config(cfg), KVKind.FULL, 8, 128, 128, None)


def test_mistral_nemo_head_dim_is_not_hidden_over_heads() -> None:
    s = spec("mistral-mistral-nemo-base-2407")
    assert 5120 // 32 == 160  # what a naive parser would use
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)
    assert kv_elements_per_token(s) == 40 * 8 * 256 == 81_920
    assert s.context_limit_tokens == 128_000


def test_mixtral_8x7b() -> None:
    s = spec("mixtral-mixtral-8x7b-v0.1")
    assert s.family == "mixtral"
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)  # sliding_window null
    assert (s.num_experts, s.num_experts_per_token) == (8, 2)
    assert s.context_limit_tokens == 32_768


def test_mistral3_nested_text_config() -> None:
    s = spec("mistral3-mistral-small-3.1-24b-instruct-2503")
    assert (s.family, s.model_type, s.architecture) == (
        "mistral3",
        "mistral3",
        "Mistral3ForConditionalGeneration",
    )
    assert (s.hidden_size, s.num_layers, s.vocab_size) == (5120, 40, 131072)
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)
    assert not s.tie_word_embeddings  # the Mistral text model's default, as vLLM reads it
    assert s.extra_params > 0 and any("vision" in note for note in s.notes)


# ------------------------------------------------------------------------------- Qwen


def test_qwen2_use_sliding_window_false_means_all_full() -> None:
    for name in ("qwen2-qwen2-7b", "qwen2-qwen2.5-7b"):
        s = spec(name)
        assert s.family == "qwen2"
        # sliding_window 131072 and max_window_layers 28 are present but use_sliding_window is false
        assert_uniform(s, KVKind.FULL, 4, 128, 128, None)
        assert kv_elements_per_token(s) == 28 * 4 * 256 == 28_672


def test_qwen2_sliding_layers_from_max_window_layers() -> None:
    # transformers' Qwen2 rule: with use_sliding_window, layers with index >= max_window_layers slide
    cfg = load("qwen2-qwen2.5-7b")
    cfg.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    s = parse_config(cfg)
    assert kinds(s) == [KVKind.FULL] * 20 + [KVKind.SLIDING] * 8
    assert {layer.cache.window for layer in s.layers[20:]} == {4096}
    assert all(layer.cache.window is None for layer in s.layers[:20])


def test_qwen3_dense_and_moe() -> None:
    s = spec("qwen3-qwen3-8b")
    assert s.family == "qwen3"
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)
    assert s.context_limit_tokens == 40_960
    moe = spec("qwen3_moe-qwen3-30b-a3b")
    assert moe.family == "qwen3_moe"
    assert_uniform(moe, KVKind.FULL, 4, 128, 128, None)
    assert kv_elements_per_token(moe) == 48 * 4 * 256 == 49_152
    assert (moe.num_experts, moe.num_experts_per_token) == (128, 8)


def test_qwen3_moe_mlp_only_layers_and_sparse_step() -> None:
    cfg = load("qwen3_moe-qwen3-30b-a3b")
    cfg.update(mlp_only_layers=[0, 1], decoder_sparse_step=2)
    s = parse_config(cfg)
    # MoE where (i + 1) % 2 == 0 and i not in mlp_only_layers
    moe_layers = [i for i, p in enumerate(s.layer_params) if p.experts]
    assert moe_layers == list(range(3, 48, 2))
    assert s.layer_params[0].mlp == 3 * 2048 * 6144  # dense layers use intermediate_size


def test_qwen3_next_hybrid_state_layers() -> None:
    s = spec("qwen3_next-qwen3-next-80b-a3b-instruct")
    assert s.family == "qwen3_next"
    full = [i for i in range(48) if (i + 1) % 4 == 0]  # full_attention_interval 4
    assert [layer.index for layer in s.layers if layer.kind is KVKind.FULL] == full
    assert s.kind_counts() == {KVKind.STATE: 36, KVKind.FULL: 12}
    attn = s.layers[3]
    assert (attn.cache.num_kv_heads, attn.cache.k_head_dim, attn.cache.v_head_dim) == (2, 256, 256)
    assert kv_elements_per_token(s) == 12 * 2 * 512 == 12_288
    state = s.layers[0]
    # conv: (2 * Hk * Dk + Hv * Dv) * kernel; recurrent: Hv * Dk * Dv
    assert state.cache.conv_state_elements == (2 * 16 * 128 + 32 * 128) * 4 == 32_768
    assert state.cache.recurrent_state_elements == 32 * 128 * 128 == 524_288
    assert state.cache.kv_elements_per_token == 0
    assert s.mamba_ssm_cache_dtype == "float32"
    # per sequence: conv in bf16 + recurrent in fp32, 36 layers
    per_seq = sum(
        layer.cache.conv_state_elements * BF16 + layer.cache.recurrent_state_elements * 4
        for layer in s.layers
        if layer.kind is KVKind.STATE
    )
    assert per_seq == 36 * (32_768 * 2 + 524_288 * 4) == 77_856_768


def test_qwen3_5_dense_hybrid_nested() -> None:
    s = spec("qwen3_5-qwen3.8-27b")
    assert (s.family, s.model_type) == ("qwen3_5", "qwen3_5")
    assert s.kind_counts() == {KVKind.STATE: 48, KVKind.FULL: 16}
    assert kv_elements_per_token(s) == 16 * 4 * 512 == 32_768
    state = s.layers[0]
    assert state.cache.conv_state_elements == (2 * 16 * 128 + 48 * 128) * 4 == 40_960
    assert state.cache.recurrent_state_elements == 48 * 128 * 128 == 786_432
    assert s.mamba_ssm_cache_dtype == "float32"  # from `mamba_ssm_dtype`
    assert s.torch_dtype == "bfloat16"  # transformers-5 `dtype` key


def test_qwen3_next_explicit_layer_types() -> None:
    cfg = load("qwen3_next-qwen3-next-80b-a3b-instruct")
    cfg["layer_types"] = ["linear_attention", "full_attention"] * 24
    s = parse_config(cfg)
    assert kinds(s) == [KVKind.STATE, KVKind.FULL] * 24


# ------------------------------------------------------------------------------ Gemma


def test_gemma2_alternates_even_layers_sliding() -> None:
    s = spec("gemma2-gemma-2-9b")
    assert s.family == "gemma2"
    assert kinds(s) == [KVKind.SLIDING, KVKind.FULL] * 21
    assert {layer.cache.window for layer in s.layers[0::2]} == {4096}
    assert all(layer.cache.num_kv_heads == 8 and layer.cache.k_head_dim == 256 for layer in s.layers)
    assert kv_elements_per_token(s) == 42 * 8 * 512 == 172_032
    assert s.torch_dtype == "float32"
    assert s.tie_word_embeddings


def test_gemma3_nested_pattern_and_transformers_defaults() -> None:
    s = spec("gemma3-gemma-3-27b-it")
    assert (s.family, s.model_type, s.architecture) == ("gemma3", "gemma3", "Gemma3ForConditionalGeneration")
    # sliding_window_pattern 6 (default): layer i is full iff (i + 1) % 6 == 0
    assert [layer.index for layer in s.layers if layer.kind is KVKind.FULL] == list(range(5, 62, 6))
    assert s.kind_counts() == {KVKind.SLIDING: 52, KVKind.FULL: 10}
    assert {layer.cache.window for layer in s.layers if layer.kind is KVKind.SLIDING} == {1024}
    assert all((layer.cache.num_kv_heads, layer.cache.k_head_dim) == (16, 128) for layer in s.layers)
    # vocab_size / max_position_embeddings are absent from the published text_config
    assert (s.vocab_size, s.max_position_embeddings) == (262_208, 131_072)
    assert any("vocab_size=262208" in note for note in s.notes)
    # linear rope factor 8 is not applied for Gemma 3 (vLLM: already part of the 128K)
    assert s.context_limit_tokens == 131_072
    assert s.tie_word_embeddings


def test_gemma3_explicit_layer_types_and_pattern() -> None:
    cfg = load("gemma3-gemma-3-27b-it")
    cfg["text_config"]["sliding_window_pattern"] = 2
    assert kinds(parse_config(cfg))[:4] == [KVKind.SLIDING, KVKind.FULL, KVKind.SLIDING, KVKind.FULL]
    cfg["text_config"]["layer_types"] = ["full_attention"] * 62
    assert set(kinds(parse_config(cfg))) == {KVKind.FULL}


def gemma4_e2b_like(**overrides: Any) -> dict[str, Any]:
    """A Gemma 4 text config in the raw config.json format (field names and rules from
    transformers 5.24's Gemma4TextConfig; E2B-like sizes, not a published config)."""
    cfg = load("synthetic/gemma4-e2b-like")
    cfg.update(overrides)
    return cfg


def test_gemma4_global_head_dim_and_kv_sharing() -> None:
    s = parse_config(gemma4_e2b_like())
    assert s.family == "gemma4" and s.tie_word_embeddings
    full = [5, 11]  # pattern 5:1 over the 15 layers that store KV
    for layer in s.layers[:15]:
        expected = (KVKind.FULL, 1, 512) if layer.index in full else (KVKind.SLIDING, 1, 256)
        assert (layer.kind, layer.cache.num_kv_heads, layer.cache.k_head_dim) == expected
    # the last 20 layers read the last storing layer of their own type: 14 (sliding) or 11 (full);
    # full layers: (i + 1) % 6 == 0, and the last layer, which transformers forces to full
    shared = s.layers[15:]
    assert all(layer.kind is KVKind.SHARED for layer in shared)
    full_shared = [i for i in range(15, 35) if (i + 1) % 6 == 0 or i == 34]
    assert [layer.cache.kv_source_layer for layer in shared] == [11 if i in full_shared else 14 for i in range(15, 35)]
    assert kv_elements_per_token(s) == 13 * 1 * 512 + 2 * 1 * 1024 == 8704


def test_gemma4_k_eq_v_global_kv_heads_and_per_layer_config() -> None:
    raw = gemma4_e2b_like(
        num_kv_shared_layers=0, num_key_value_heads=4, num_global_key_value_heads=2, attention_k_eq_v=True
    )
    s = parse_config(raw)
    full = [layer.cache for layer in s.layers if layer.kind is KVKind.FULL]
    assert {(cache.num_kv_heads, cache.k_head_dim) for cache in full} == {(2, 512)}
    assert any("attention_k_eq_v" in note for note in s.notes)
    # the form transformers 5 writes: per_layer_config instead of global_head_dim / num_global_*
    written = gemma4_e2b_like(num_kv_shared_layers=0, num_key_value_heads=4, attention_k_eq_v=True)
    del written["global_head_dim"]
    written["per_layer_config"] = {str(i): {"head_dim": 512, "num_key_value_heads": 2} for i in (5, 11, 17, 23, 29, 34)}
    assert [(x.kind, x.cache.num_kv_heads, x.cache.k_head_dim) for x in parse_config(written).layers] == [
        (x.kind, x.cache.num_kv_heads, x.cache.k_head_dim) for x in s.layers
    ]
    # without attention_k_eq_v, num_global_key_value_heads is ignored (transformers' rule)
    plain = parse_config(gemma4_e2b_like(num_kv_shared_layers=0, num_key_value_heads=4, num_global_key_value_heads=2))
    assert {layer.cache.num_kv_heads for layer in plain.layers} == {4}


def test_gemma4_last_layer_forced_full() -> None:
    types = ["sliding_attention"] * 34 + ["sliding_attention"]
    s = parse_config(gemma4_e2b_like(layer_types=types, num_kv_shared_layers=0))
    assert s.layers[-1].kind is KVKind.FULL
    assert s.kind_counts() == {KVKind.SLIDING: 34, KVKind.FULL: 1}


# -------------------------------------------------------------------------------- Phi


def test_phi3_mini_4k_sliding_2047_on_every_layer() -> None:
    s = spec("phi3-phi-3-mini-4k-instruct")
    assert s.family == "phi3"
    assert_uniform(s, KVKind.SLIDING, 32, 96, 96, 2047)  # D = 3072 / 32
    assert kv_elements_per_token(s) == 32 * 32 * 192 == 196_608


def test_phi3_longrope_note() -> None:
    cfg = load("phi3-phi-3-mini-4k-instruct")
    cfg.update(
        max_position_embeddings=131072,
        sliding_window=262144,
        rope_scaling={"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48},
    )
    s = parse_config(cfg)
    assert s.context_limit_tokens == 131_072  # longrope: no factor applied
    assert any("original_max_position_embeddings (4096)" in note for note in s.notes)


# -------------------------------------------------------------------------------- MLA


@pytest.mark.parametrize(
    ("name", "layers"),
    [
        ("deepseek_v2-deepseek-v2", 60),
        ("deepseek_v2-deepseek-v2-lite", 27),
        ("deepseek_v3-deepseek-v3", 61),
        ("deepseek_v3-deepseek-r1", 61),
        ("kimi_k2-kimi-k2-instruct", 61),
    ],
)
def test_mla_one_latent_per_layer(name: str, layers: int) -> None:
    s = spec(name)
    assert s.is_mla
    assert_uniform(s, KVKind.MLA, 1, 512, 64, None)  # kv_lora_rank, qk_rope_head_dim
    assert all(layer.cache.replicated_under_tp for layer in s.layers)
    assert kv_elements_per_token(s) == layers * (512 + 64)
    assert s.num_kv_heads == 1


def test_deepseek_v3_kv_context_and_fp8() -> None:
    s = spec("deepseek_v3-deepseek-v3")
    assert s.family == "deepseek_v3"
    assert kv_elements_per_token(s) == 61 * 576 == 35_136
    # yarn: max_position_embeddings (vLLM 0.30+), which is original_max_position_embeddings 4096 x factor 40 (0.29)
    assert s.context_limit_tokens == 4096 * 40 == 163_840 and s.context_limit_vllm_029_tokens is None
    assert s.quantization is not None
    assert (s.quantization.method, s.quantization.weight_format) == ("fp8", "fp8")
    assert (s.num_experts, s.num_experts_per_token) == (256, 8)


def test_deepseek_head_dim_trap_is_ignored() -> None:
    cfg = load("deepseek_v3-deepseek-v3")
    cfg["head_dim"] = 64  # what transformers writes (= qk_rope_head_dim); not a KV head size
    s = parse_config(cfg)
    assert kv_elements_per_token(s) == 61 * 576
    assert kv_elements_per_token(s) != 61 * 2 * 128 * 64  # the naive per-head reading


def test_kimi_k2_family() -> None:
    s = spec("kimi_k2-kimi-k2-instruct")
    assert (s.family, s.architecture) == ("kimi_k2", "DeepseekV3ForCausalLM")
    assert s.context_limit_tokens == 4096 * 32 == 131_072


def test_glm4_moe_lite_is_mla() -> None:
    s = spec("synthetic/glm4_moe_lite-defaults")
    assert s.family == "glm4_moe_lite" and s.is_mla
    assert_uniform(s, KVKind.MLA, 1, 512, 64, None)
    assert kv_elements_per_token(s) == 47 * 576
    assert [bool(p.experts) for p in s.layer_params] == [False] + [True] * 46


def test_unknown_model_type_with_kv_lora_rank_is_mla() -> None:
    cfg = load("deepseek_v3-deepseek-v3")
    cfg["model_type"] = "acme_mla"
    s = parse_config(cfg)
    assert s.is_generic and s.family == "generic" and s.is_mla
    assert kv_elements_per_token(s) == 61 * 576


# ------------------------------------------------------------------------------ GPT-OSS


@pytest.mark.parametrize(("name", "layers"), [("gpt_oss-gpt-oss-20b", 24), ("gpt_oss-gpt-oss-120b", 36)])
def test_gpt_oss_layer_types_and_mxfp4(name: str, layers: int) -> None:
    s = spec(name)
    assert s.family == "gpt_oss"
    assert kinds(s) == [KVKind.SLIDING, KVKind.FULL] * (layers // 2)
    assert {layer.cache.window for layer in s.layers if layer.kind is KVKind.SLIDING} == {128}
    assert kv_elements_per_token(s) == layers * 8 * 128
    q = s.quantization
    assert q is not None and (q.method, q.weight_format, q.experts_only) == ("mxfp4", "mxfp4", True)
    assert s.context_limit_tokens == 4096 * 32 == 131_072
    assert any("bfloat16" in note for note in s.notes)  # no torch_dtype in these configs


# ------------------------------------------------------------------------------ Llama 4


def test_llama4_scout_chunked_and_nested() -> None:
    s = spec("llama4-llama-4-scout-17b-16e-instruct")
    assert (s.family, s.model_type) == ("llama4", "llama4")
    # no_rope_layers[i] == 0 (every 4th layer) -> global full attention; others chunked (8192)
    assert [layer.index for layer in s.layers if layer.kind is KVKind.FULL] == list(range(3, 48, 4))
    chunked = [layer for layer in s.layers if layer.kind is KVKind.CHUNKED]
    assert len(chunked) == 36 and {layer.cache.window for layer in chunked} == {8192}
    assert kv_elements_per_token(s) == 48 * 8 * 256 == 98_304
    assert (s.num_experts, s.num_experts_per_token) == (16, 1)
    assert s.intermediate_size == 16384  # intermediate_size_mlp (dense); experts use 8192
    assert s.context_limit_tokens == 10_485_760
    assert not s.tie_word_embeddings  # from the wrapper


def test_llama4_default_interval_and_moe_step() -> None:
    cfg = load("llama4-llama-4-scout-17b-16e-instruct")
    text = cfg["text_config"]
    text["no_rope_layers"] = []  # empty -> every no_rope_layer_interval-th (4th) layer is NoPE/full
    del text["moe_layers"]
    text["interleave_moe_layer_step"] = 2  # Maverick-style: MoE at 1, 3, 5, ...
    s = parse_config(cfg)
    assert [layer.index for layer in s.layers if layer.kind is KVKind.FULL] == list(range(3, 48, 4))
    assert [i for i, p in enumerate(s.layer_params) if p.experts] == list(range(1, 48, 2))
    assert s.layer_params[0].mlp == 3 * 5120 * 16384


# --------------------------------------------------------------------------------- Falcon


def test_falcon_7b_multi_query() -> None:
    s = spec("falcon-falcon-7b")
    assert s.family == "falcon"
    assert_uniform(s, KVKind.FULL, 1, 64, 64, None)  # one KV head, D = 4544 / 71
    assert kv_elements_per_token(s) == 32 * 128 == 4096
    # no length key at all: vLLM's default
    assert s.context_limit_tokens == 2048
    assert any("2048" in note for note in s.notes)
    assert s.tie_word_embeddings  # Falcon default


def test_falcon_40b_new_decoder_architecture_caches_kv_heads() -> None:
    s = spec("falcon-falcon-40b")
    # engines cache num_kv_heads = 8 (transformers over-caches all 128 heads)
    assert_uniform(s, KVKind.FULL, 8, 64, 64, None)
    assert kv_elements_per_token(s) == 60 * 8 * 128 == 61_440
    assert any("over-caches" in note for note in s.notes)


def test_falcon_rw_style_mha() -> None:
    cfg = load("falcon-falcon-7b")
    cfg.update(multi_query=False)
    assert_uniform(parse_config(cfg), KVKind.FULL, 71, 64, 64, None)


# -------------------------------------------------------------------------------- hybrids


def test_jamba_attention_period_and_mamba_state() -> None:
    s = spec("jamba-jamba-v0.1")
    assert s.family == "jamba" and s.has_state_layers
    assert [layer.index for layer in s.layers if layer.kind is KVKind.FULL] == [4, 12, 20, 28]
    assert kv_elements_per_token(s) == 4 * 8 * 256 == 8192
    mamba = s.layers[0]
    inner = 2 * 4096  # mamba_expand * hidden
    assert mamba.cache.conv_state_elements == inner * 4 == 32_768  # * d_conv
    assert mamba.cache.recurrent_state_elements == inner * 16 == 131_072  # * d_state
    assert (s.num_experts, s.num_experts_per_token) == (16, 2)
    assert [i for i, p in enumerate(s.layer_params) if p.experts] == list(range(1, 32, 2))


def test_nemotron_h_pattern_only_mixer_layers_listed() -> None:
    s = spec("nemotron_h-nemotron-h-8b-base-8k")
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    assert s.family == "nemotron_h" and s.num_layers == len(pattern) == 52
    assert len(s.layer_params) == 52
    # MLP-only '-' layers cache nothing and have no LayerKVSpec; indices stay decoder indices
    assert [layer.index for layer in s.layers] == [i for i, ch in enumerate(pattern) if ch in "M*"]
    assert [layer.index for layer in s.layers if layer.kind is KVKind.FULL] == [
        i for i, ch in enumerate(pattern) if ch == "*"
    ]
    assert s.kind_counts() == {KVKind.STATE: 24, KVKind.FULL: 4}
    mamba = s.layers[0]
    inner = 128 * 64  # mamba_num_heads * mamba_head_dim
    assert mamba.cache.conv_state_elements == (inner + 2 * 8 * 128) * 4 == 40_960
    assert mamba.cache.recurrent_state_elements == inner * 128 == 1_048_576
    assert kv_elements_per_token(s) == 4 * 8 * 256
    assert any("MLP/MoE-only" in note for note in s.notes)


def test_nemotron_h_transformers5_layers_block_type_and_ssm_dtype() -> None:
    cfg = load("nemotron_h-nemotron-h-8b-base-8k")
    codes = {"M": "mamba", "*": "attention", "-": "mlp"}
    cfg["layers_block_type"] = [codes[ch] for ch in cfg.pop("hybrid_override_pattern")]
    cfg["mamba_ssm_cache_dtype"] = "bfloat16"
    s = parse_config(cfg)
    assert s.kind_counts() == {KVKind.STATE: 24, KVKind.FULL: 4}
    assert s.mamba_ssm_cache_dtype == "bfloat16"


# ------------------------------------------------------------------------------ GLM, MiniMax


def test_glm4_9b() -> None:
    s = spec("glm4-glm-4-9b-0414")
    assert s.family == "glm4"
    assert_uniform(s, KVKind.FULL, 2, 128, 128, None)
    assert kv_elements_per_token(s) == 40 * 2 * 256 == 20_480


def test_glm_4_5_moe_gqa_not_mla() -> None:
    s = spec("glm4_moe-glm-4.5")
    assert s.family == "glm4_moe" and not s.is_mla
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)  # head_dim 128 (96 heads * 128 != 5120)
    assert kv_elements_per_token(s) == 92 * 8 * 256 == 188_416
    assert (s.num_experts, s.num_experts_per_token) == (160, 8)
    assert s.extra_params > 0  # num_nextn_predict_layers = 1


def test_minimax_m2_full_gqa_fp8() -> None:
    s = spec("minimax_m2-minimax-m2")
    assert s.family == "minimax_m2"
    assert_uniform(s, KVKind.FULL, 8, 128, 128, None)
    assert kv_elements_per_token(s) == 62 * 8 * 256 == 126_976
    assert s.quantization is not None and s.quantization.weight_format == "fp8"
    assert s.context_limit_tokens == 196_608
    assert (s.num_experts, s.num_experts_per_token) == (256, 8)


# --------------------------------------------------------------------------------- generic


def acme(**overrides: Any) -> dict[str, Any]:
    """A made-up model type with the standard Llama-style fields."""
    cfg: dict[str, Any] = {
        "model_type": "acme_lm",
        "architectures": ["AcmeForCausalLM"],
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "intermediate_size": 2816,
        "vocab_size": 32000,
        "max_position_embeddings": 8192,
        "torch_dtype": "bfloat16",
    }
    cfg.update(overrides)
    return cfg


def test_generic_path() -> None:
    s = parse_config(acme(), name="acme/acme-1b")
    assert s.is_generic and s.family == "generic" and s.model_type == "acme_lm"
    assert any("not a known family" in note for note in s.notes)
    assert_uniform(s, KVKind.FULL, 4, 64, 64, None)  # D = 1024 / 16
    attn = 1024 * 1024 + 2 * 1024 * 256 + 1024 * 1024
    assert s.total_params == 2 * 32000 * 1024 + 4 * (attn + 3 * 1024 * 2816 + 2 * 1024) + 1024


def test_generic_separate_v_head_dim() -> None:
    s = parse_config(acme(head_dim=128, v_head_dim=64))
    assert_uniform(s, KVKind.FULL, 4, 128, 64, None)
    assert kv_elements_per_token(s) == 4 * 4 * (128 + 64)
    # q 16*128, k 4*128, v 4*64 outputs; o_proj reads 16 * 64
    attn = 1024 * 16 * 128 + 1024 * 4 * 128 + 1024 * 4 * 64 + 16 * 64 * 1024
    assert s.layer_params[0].attention == attn


def test_generic_layer_types_windows_and_kv_sharing() -> None:
    types = ["sliding_attention", "sliding_attention", "full_attention"] * 2
    cfg = acme(num_hidden_layers=6, layer_types=types, sliding_window=512, num_kv_shared_layers=2)
    s = parse_config(cfg)
    assert kinds(s) == [KVKind.SLIDING, KVKind.SLIDING, KVKind.FULL, KVKind.SLIDING, KVKind.SHARED, KVKind.SHARED]
    # a shared layer reads the last non-shared layer of its own attention type
    assert (s.layers[4].cache.kv_source_layer, s.layers[5].cache.kv_source_layer) == (3, 2)
    assert s.layers[4].cache.kv_elements_per_token == 0
    assert kv_elements_per_token(s) == 4 * 4 * 128


def test_generic_sliding_window_applies_to_every_layer() -> None:
    s = parse_config(acme(sliding_window=1024))
    assert_uniform(s, KVKind.SLIDING, 4, 64, 64, 1024)
    assert any("sliding_window" in note for note in s.notes)


def test_generic_missing_field_is_named() -> None:
    cfg = acme()
    del cfg["num_attention_heads"]
    with pytest.raises(ConfigError, match="num_attention_heads"):
        parse_config(cfg)


def test_name_defaults_to_name_or_path() -> None:
    cfg = acme(_name_or_path="acme/acme-1b")
    del cfg["vocab_size"]
    with pytest.raises(ConfigError, match=r"^acme/acme-1b: missing required field `vocab_size`$"):
        parse_config(cfg)


def test_unknown_multimodal_wrapper_parses_text_config() -> None:
    cfg = {"model_type": "acme_vl", "text_config": acme(), "vision_config": {"hidden_size": 1024}}
    s = parse_config(cfg)
    assert s.is_generic and s.num_layers == 4
    assert any("vision tower not counted" in note for note in s.notes)


# ---------------------------------------------------------------------- context and dtype


def test_yarn_scales_the_limit_only_up_to_vllm_029() -> None:
    """Qwen2.5-7B-Instruct with the YaRN snippet from its model card. vLLM 0.30's `_get_and_verify_max_len`
    leaves the length keys as they are for YaRN (`rope_type` in its unscaled list with su / longrope / llama3);
    0.29's set the limit to original_max_position_embeddings x factor (both read in the wheels)."""
    cfg = load("qwen2-qwen2.5-7b")
    cfg["max_position_embeddings"] = 32768
    cfg["rope_scaling"] = {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}
    s = parse_config(cfg)
    assert (s.max_position_embeddings, s.context_limit_tokens, s.context_limit_vllm_029_tokens) == (
        32_768, 32_768, 32_768 * 4
    )
    assert any("up to 0.29" in note for note in s.notes)
    # a published YaRN config whose length keys already hold the scaled length: one limit, no second
    deepseek = parse_config(acme(max_position_embeddings=163840, rope_scaling={
        "type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}))
    assert (deepseek.context_limit_tokens, deepseek.context_limit_vllm_029_tokens) == (163840, None)
    # deepseek_yarn (Sarvam-105B, vllm-project/vllm#56279): 0.29 multiplied the scaled length by the factor again
    sarvam = parse_config(acme(max_position_embeddings=131072, rope_scaling={
        "rope_type": "deepseek_yarn", "factor": 40, "original_max_position_embeddings": 4096}))
    assert (sarvam.context_limit_tokens, sarvam.context_limit_vllm_029_tokens) == (131072, 131072 * 40)


def test_dynamic_and_linear_rope_multiply_max_positions() -> None:
    for rope in ({"type": "dynamic", "factor": 2.0}, {"rope_type": "linear", "factor": 2.0}):
        s = parse_config(acme(rope_scaling=rope))
        assert s.context_limit_tokens == 8192 * 2


def test_transformers5_rope_parameters_nested_per_layer_type() -> None:
    rope = {
        "full_attention": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
        "sliding_attention": {"rope_type": "default"},
    }
    nested = parse_config(acme(rope_parameters=rope))
    assert (nested.context_limit_tokens, nested.context_limit_vllm_029_tokens) == (8192, 4096 * 4)
    plain = {"rope_type": "default", "rope_theta": 10000.0}
    assert parse_config(acme(rope_parameters=plain)).context_limit_tokens == 8192


def test_smallest_length_key_wins() -> None:
    assert parse_config(acme(seq_length=4096)).context_limit_tokens == 4096


@pytest.mark.parametrize(
    ("cfg_dtype", "expected"),
    [
        ({"torch_dtype": "float16"}, "float16"),
        ({"dtype": "bfloat16"}, "bfloat16"),
        ({"torch_dtype": "fp32"}, "float32"),
    ],
)
def test_dtype_keys(cfg_dtype: dict[str, str], expected: str) -> None:
    cfg = acme()
    del cfg["torch_dtype"]
    cfg.update(cfg_dtype)
    assert parse_config(cfg).torch_dtype == expected


def test_missing_dtype_defaults_to_bf16_with_note() -> None:
    cfg = acme()
    del cfg["torch_dtype"]
    s = parse_config(cfg)
    assert s.torch_dtype == "bfloat16"
    assert any("assuming bfloat16" in note for note in s.notes)


# ---------------------------------------------------------------------------- quantization


@pytest.mark.parametrize(
    ("qcfg", "expected"),
    [
        ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, ("fp8", "fp8", None, False)),
        ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, ("awq", "int4", 128, False)),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, ("gptq", "int4", 128, False)),
        ({"quant_method": "gptq", "bits": 8, "group_size": -1}, ("gptq", "int8", None, False)),
        ({"quant_method": "mxfp4"}, ("mxfp4", "mxfp4", 32, True)),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
            ("bitsandbytes", "int4", 64, False),
        ),
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, ("bitsandbytes", "int8", None, False)),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}},
            },
            ("compressed-tensors", "fp8", None, False),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}},
            },
            ("compressed-tensors", "int8", None, False),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "group_0": {"weights": {"num_bits": 4, "type": "int", "group_size": 128, "strategy": "group"}}
                },
            },
            ("compressed-tensors", "int4", 128, False),
        ),
    ],
)
def test_quantization_config(qcfg: dict[str, Any], expected: tuple[Any, ...]) -> None:
    q = parse_config(acme(quantization_config=qcfg)).quantization
    assert q is not None
    assert (q.method, q.weight_format, q.group_size, q.experts_only) == expected


@pytest.mark.parametrize(
    ("algo", "expected"), [("FP8", ("modelopt", "fp8", None)), ("W4A16_AWQ", ("modelopt", "int4", 128))]
)
def test_modelopt_quantization(algo: str, expected: tuple[Any, ...]) -> None:
    q = parse_config(acme(quantization_config={"quant_method": "modelopt", "quant_algo": algo})).quantization
    assert q is not None and (q.method, q.weight_format, q.group_size) == expected


def test_nvfp4_checkpoints_are_4_5_bit_with_attention_kept_16_bit_when_ignored() -> None:
    for qcfg in (
        {"quant_method": "modelopt", "quant_algo": "NVFP4"},
        {
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
        },
    ):
        s = parse_config(acme(quantization_config=qcfg))
        assert s.quantization is not None
        assert (s.quantization.weight_format, s.quantization.group_size) == ("nvfp4", 16)
        assert s.quantization.attention_quantized and s.quantization.mlp_quantized
    layers = acme()["num_hidden_layers"]
    # ModelOpt writes shell wildcards (vLLM ModelOptConfig.is_layer_excluded: fnmatch, or a substring)
    modelopt = {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "exclude_modules": ["lm_head", *[f"model.layers.{i}.self_attn*" for i in range(layers)]],
    }
    s = parse_config(acme(quantization_config=modelopt))
    assert s.quantization is not None and not s.quantization.attention_quantized and s.quantization.mlp_quantized


def test_compressed_tensors_float4_is_mxfp4_in_groups_of_32_and_nvfp4_in_tensor_groups_of_16() -> None:
    """vLLM 0.33 CompressedTensorsConfig: `_is_mxfp4` (group strategy, 32 a group, an e8m0 scale each: 4.25 bits)
    and `_is_nvfp4_format` (tensor_group strategy, 16 a group, an fp8 scale each and a global one: 4.5 bits)."""
    from fractions import Fraction

    from capacity.weights import weight_format

    def parsed(strategy: str, group: int) -> Any:
        weights = {"num_bits": 4, "type": "float", "strategy": strategy, "group_size": group}
        return parse_config(acme(quantization_config={"quant_method": "compressed-tensors", "config_groups": {
            "g": {"weights": weights}}}))  # fmt: skip

    mx, nv = parsed("group", 32), parsed("tensor_group", 16)
    assert (mx.quantization.weight_format, weight_format(mx, "auto").linear_bytes_per_param) == ("mxfp4", Fraction(17, 32))
    assert (nv.quantization.weight_format, weight_format(nv, "auto").linear_bytes_per_param) == ("nvfp4", Fraction(9, 16))
    assert mx.quantization.attention_quantized  # as stored: the ignore list says which parts stay 16-bit


@pytest.mark.parametrize(
    ("ignore", "attention_kept", "mlp_kept"),
    [
        # compressed-tensors reads `re:` + a regex matched from the start of the name, else the exact name
        (["lm_head", "re:.*self_attn.*"], True, False),
        (["lm_head", *[f"model.layers.{i}.self_attn.o_proj" for i in range(4)]], True, False),
        (["lm_head", "re:.*mlp.*"], False, True),
        # not a match in vLLM: a shell wildcard without `re:`, a regex that does not match from the start, and a
        # list that misses a layer
        (["model.layers.*.self_attn*"], False, False),
        (["re:self_attn"], False, False),
        (["lm_head", *[f"model.layers.{i}.self_attn.o_proj" for i in range(3)]], False, False),
    ],
)
def test_compressed_tensors_ignore_lists_are_read_as_vllm_reads_them(
    ignore: list[str], attention_kept: bool, mlp_kept: bool
) -> None:
    q = parse_config(acme(quantization_config=compressed_tensors_int4(32, True, ignore))).quantization
    assert q is not None and q.weight_format == "int4"
    assert (not q.attention_quantized, not q.mlp_quantized) == (attention_kept, mlp_kept)


def _small_moe(model_type: str, quantization_config: dict[str, Any]) -> dict[str, Any]:
    """Two decoder layers, the first dense (DeepSeek's `first_k_dense_replace`), 8 experts and one shared."""
    return {
        "model_type": model_type,
        "architectures": ["DeepseekV3ForCausalLM" if model_type == "deepseek_v3" else "Qwen2MoeForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128,
        "n_routed_experts": 8,
        "num_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 64,
        "q_lora_rank": None,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "v_head_dim": 32,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "quantization_config": quantization_config,
    }


def test_routed_experts_only_int4_is_what_kimi_k2_thinking_ships() -> None:
    """The ignore list of Kimi-K2-Thinking's config (attention, shared experts and the dense MLP kept 16-bit):
    every part but the routed experts is in bf16; the experts are packed INT4 with one bf16 scale per 32 weights and
    no zero point (symmetric), 0.5 + 2/32 bytes a weight."""
    from fractions import Fraction

    from capacity.weights import estimate_weights

    ignore = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]
    spec = parse_config(_small_moe("deepseek_v3", compressed_tensors_int4(32, True, ignore)))
    q = spec.quantization
    assert q is not None and q.experts_only and not q.group_zero_points
    experts = 8 * 3 * 256 * 128  # one MoE layer
    rest = spec.total_params - experts - sum(p.fp32_router for p in spec.layer_params)
    by_hand = experts * Fraction(1, 2) + experts * Fraction(2, 32) + rest * 2 + 8 * 4  # the fp32 router bias
    assert estimate_weights(spec, "auto", tp=1).per_gpu_bytes == by_hand
    asymmetric = parse_config(_small_moe("deepseek_v3", compressed_tensors_int4(32, False, ignore))).quantization
    assert asymmetric is not None and asymmetric.group_zero_points  # a packed 4-bit zero point per group: 1/64 B


def test_a_shared_expert_is_matched_by_the_familys_own_module_name() -> None:
    """Qwen2-MoE's module is `mlp.shared_expert` (singular): the plural pattern DeepSeek checkpoints use does not
    match it, so vLLM quantizes it (a real recipe's pitfall); DeepSeek's `mlp.shared_experts` it does match."""
    plural = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]
    qwen = parse_config(_small_moe("qwen2_moe", compressed_tensors_int4(32, True, plural))).quantization
    assert qwen is not None and qwen.mlp_quantized
    singular = [*plural[:2], "re:.*shared_expert\\..*"]
    qwen = parse_config(_small_moe("qwen2_moe", compressed_tensors_int4(32, True, singular))).quantization
    assert qwen is not None and not qwen.mlp_quantized
    deepseek = parse_config(_small_moe("deepseek_v3", compressed_tensors_int4(32, True, plural[:3]))).quantization
    assert deepseek is not None and deepseek.mlp_quantized  # the dense layer's MLP is not in the list


def test_an_ignore_pattern_that_could_backtrack_without_bound_is_flagged_not_run() -> None:
    hostile = ["re:(.*)*x", "re:.*a.*b.*c.*d.*e", "re:([", "re:.*self_attn.*"]
    spec = parse_config(acme(quantization_config=compressed_tensors_int4(32, True, hostile)))
    assert spec.quantization is not None and not spec.quantization.attention_quantized  # the sound pattern runs
    assert [note for note in spec.notes if "not evaluated" in note] == [
        "3 quantization ignore pattern(s) not evaluated (not a valid regex, or nested or repeated repetition), "
        "e.g. '(.*)*x': what they name is sized quantized"
    ]


def test_an_ignore_list_too_long_to_test_on_every_layer_is_cut_off_with_a_note() -> None:
    """Thousands of layers times thousands of patterns: past the budget every part is sized quantized."""
    patterns = [f"re:.*layers\\.{i}\\.nothing" for i in range(2000)] + ["re:.*self_attn.*"]
    spec = parse_config(acme(num_hidden_layers=2000, quantization_config=compressed_tensors_int4(32, True, patterns)))
    assert spec.quantization is not None and spec.quantization.attention_quantized
    assert any("too long to evaluate" in note for note in spec.notes)


def test_unknown_quantization_is_noted_not_fatal() -> None:
    s = parse_config(acme(quantization_config={"quant_method": "hqq"}))
    assert s.quantization is None
    assert any("hqq" in note for note in s.notes)


# ----------------------------------------------------------------------------- bad input


def _without(cfg: dict[str, Any], key: str) -> dict[str, Any]:
    out = dict(cfg)
    del out[key]
    return out


BAD_CONFIGS: list[tuple[str, Any, str]] = [
    ("missing hidden_size", _without(acme(), "hidden_size"), "missing required field `hidden_size`"),
    ("missing layers", _without(acme(), "num_hidden_layers"), "`num_hidden_layers`"),
    ("missing vocab", _without(acme(), "vocab_size"), "`vocab_size`"),
    ("bool is not an int", acme(num_hidden_layers=True), "`num_hidden_layers` must be an integer"),
    ("string size", acme(hidden_size="4096"), "`hidden_size` must be an integer"),
    ("float size", acme(intermediate_size=2816.5), "`intermediate_size` must be an integer"),
    ("zero layers", acme(num_hidden_layers=0), "`num_hidden_layers` must be positive"),
    ("negative hidden", acme(hidden_size=-1024), "`hidden_size` must be positive"),
    ("absurd layers", acme(num_hidden_layers=2_000_000), "implausibly large"),
    ("absurd hidden", acme(hidden_size=2_000_000), "implausibly large"),
    ("heads do not divide", acme(num_key_value_heads=5), "not divisible by num_key_value_heads"),
    ("kv heads > heads", acme(num_key_value_heads=32), "exceeds num_attention_heads"),
    ("hidden % heads", acme(hidden_size=1000), "hidden_size (1000) is not divisible"),
    ("window zero", acme(sliding_window=0), "`sliding_window` must be positive"),
    ("negative window", load("mistral-mistral-7b-v0.1") | {"sliding_window": -4096}, "`sliding_window`"),
    (
        "layer_types length",
        acme(layer_types=["full_attention"] * 3),
        "`layer_types` has 3 entries but the model has 4 layers",
    ),
    (
        "unknown layer type",
        acme(layer_types=["full_attention", "banana_attention", "full_attention", "full_attention"]),
        "unsupported layer type 'banana_attention'",
    ),
    ("layer_types not a list", acme(layer_types="full_attention"), "`layer_types` must be a list of strings"),
    ("non-dict: list", [1, 2, 3], "must be a JSON object, got list"),
    ("non-dict: string", "config.json", "must be a JSON object, got str"),
    ("non-dict: None", None, "must be a JSON object, got NoneType"),
    ("text_config not an object", {"model_type": "gemma3", "text_config": [1]}, "`text_config` must be an object"),
    ("bad torch_dtype", acme(torch_dtype="float8"), "`torch_dtype` 'float8' is not one of"),
    ("bad tie flag", acme(tie_word_embeddings="yes"), "`tie_word_embeddings` must be true or false"),
    ("rope factor not a number", acme(rope_scaling={"type": "dynamic", "factor": "2"}), "rope scaling `factor`"),
    ("rope not an object", acme(rope_scaling=[1]), "rope scaling must be an object"),
    (
        "nemotron bad pattern",
        load("nemotron_h-nemotron-h-8b-base-8k") | {"hybrid_override_pattern": "M*X"},
        "unknown layer codes 'X'",
    ),
    (
        "nemotron pattern length",
        load("nemotron_h-nemotron-h-8b-base-8k") | {"hybrid_override_pattern": "M*-"},
        "does not match the 3 layers",
    ),
    (
        "jamba offset >= period",
        load("jamba-jamba-v0.1") | {"attn_layer_offset": 8},
        "`attn_layer_offset` (8) must be smaller than `attn_layer_period` (8)",
    ),
    ("mla missing rank dims", _without(load("deepseek_v3-deepseek-v3"), "qk_rope_head_dim"), "qk_rope_head_dim"),
    ("moe missing experts", _without(load("mixtral-mixtral-8x7b-v0.1"), "num_local_experts"), "num_local_experts"),
    (
        "llama4 chunk size zero",
        {
            **load("llama4-llama-4-scout-17b-16e-instruct"),
            "text_config": {**load("llama4-llama-4-scout-17b-16e-instruct")["text_config"], "attention_chunk_size": 0},
        },
        "`text_config.attention_chunk_size` must be positive",
    ),
    (
        "kv sharing everything",
        acme(num_kv_shared_layers=4),
        "`num_kv_shared_layers` (4) must be smaller than the number of layers (4)",
    ),
    (
        "awq bits",
        acme(quantization_config={"quant_method": "awq", "bits": 3}),
        "unsupported awq bit width 3",
    ),
    (
        "compressed-tensors without groups",
        acme(quantization_config={"quant_method": "compressed-tensors"}),
        "no `config_groups`",
    ),
]


@pytest.mark.parametrize(("case", "config", "message"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_input_raises_one_line_config_error(case: str, config: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(config)
    text = str(err.value)
    assert "\n" not in text
    assert message in text, f"{case}: {text}"


def _mutations(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key in cfg:
        for value in (None, "x", True, -1, [None], {"a": None}):
            out.append({**cfg, key: value})
        out.append(_without(cfg, key))
    return out


# one config per distinct code path (nested wrappers, MLA, hybrids, MoE variants)
FUZZED = [
    "llama-llama-3.1-8b",
    "mistral3-mistral-small-3.1-24b-instruct-2503",
    "mixtral-mixtral-8x7b-v0.1",
    "qwen2-qwen2.5-7b",
    "qwen3_moe-qwen3-30b-a3b",
    "qwen3_next-qwen3-next-80b-a3b-instruct",
    "qwen3_5-qwen3.8-27b",
    "gemma3-gemma-3-27b-it",
    "phi3-phi-3-mini-4k-instruct",
    "deepseek_v2-deepseek-v2-lite",
    "gpt_oss-gpt-oss-20b",
    "llama4-llama-4-scout-17b-16e-instruct",
    "falcon-falcon-40b",
    "jamba-jamba-v0.1",
    "nemotron_h-nemotron-h-8b-base-8k",
    "glm4_moe-glm-4.5",
    "minimax_m2-minimax-m2",
]


@pytest.mark.parametrize("name", FUZZED)
def test_garbage_in_any_field_never_leaks_other_exceptions(name: str) -> None:
    cfg = load(name)
    variants = _mutations(cfg)
    if isinstance(cfg.get("text_config"), dict):
        variants += [{**cfg, "text_config": t} for t in _mutations(cfg["text_config"])]
    for variant in variants:
        try:
            parse_config(copy.deepcopy(variant))
        except ConfigError as exc:
            assert "\n" not in str(exc)


def test_every_published_config_parses_with_consistent_layers() -> None:
    for path in sorted(CONFIGS.glob("*.json")):
        s = parse_config(json.loads(path.read_text()), name=path.stem)
        assert s.family == path.stem.split("-")[0], path.stem
        assert len(s.layer_params) == s.num_layers
        indices = [layer.index for layer in s.layers]
        assert indices == sorted(set(indices)) and all(0 <= i < s.num_layers for i in indices)
        if s.family != "nemotron_h":
            assert len(s.layers) == s.num_layers
        for layer in s.layers:
            assert isinstance(layer, LayerKVSpec)
            if layer.kind in (KVKind.SLIDING, KVKind.CHUNKED):
                assert layer.cache.window and layer.cache.window > 0
