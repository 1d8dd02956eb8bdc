"""Parameter counts from config.json, against totals derived by hand from the published configs.

Every expected number is written out as arithmetic over the config's fields, following the module
structure transformers builds for the family; where the model's safetensors metadata publishes a
total, the hand arithmetic is also checked against that published number.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.hf_config import parse_config
from capacity.spec import ModelSpec
from capacity.weights import estimate_weights

CONFIGS = Path(__file__).parent / "configs"


def spec(name: str) -> ModelSpec:
    return parse_config(json.loads((CONFIGS / f"{name}.json").read_text()), name=name)


def gqa(h: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """q, k, v, o projections without bias."""
    return h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h


def llama_like(h: int, layers: int, heads: int, kv: int, d: int, inter: int, vocab: int, tied: bool) -> int:
    per_layer = gqa(h, heads, kv, d) + 3 * h * inter + 2 * h  # attention, gated MLP, 2 RMSNorms
    return vocab * h * (1 if tied else 2) + layers * per_layer + h  # + final norm


# ------------------------------------------------------------------------------ dense


@pytest.mark.parametrize(
    ("name", "published"),
    [
        # h, L, H, H_kv, D, inter, vocab
        ("llama-llama-2-7b", 6_738_415_616),
        ("llama-meta-llama-3-8b", 8_030_261_248),
        ("llama-llama-3.1-8b", 8_030_261_248),
        ("llama-llama-3.1-70b", 70_553_706_496),
        ("llama-llama-3.3-70b-instruct", 70_553_706_496),
    ],
)
def test_llama_totals(name: str, published: int) -> None:
    dims = {
        "llama-llama-2-7b": (4096, 32, 32, 32, 128, 11008, 32000),
        "llama-meta-llama-3-8b": (4096, 32, 32, 8, 128, 14336, 128256),
        "llama-llama-3.1-8b": (4096, 32, 32, 8, 128, 14336, 128256),
        "llama-llama-3.1-70b": (8192, 80, 64, 8, 128, 28672, 128256),
        "llama-llama-3.3-70b-instruct": (8192, 80, 64, 8, 128, 28672, 128256),
    }[name]
    expected = llama_like(*dims, tied=False)
    assert expected == published
    s = spec(name)
    assert s.total_params == expected
    assert s.lm_head_params == s.embedding_params == dims[6] * dims[0]


def test_llama_3_1_8b_breakdown() -> None:
    s = spec("llama-llama-3.1-8b")
    # q 4096*4096 + k,v 2*4096*1024 + o 4096*4096
    assert s.layer_params[0].attention == 16_777_216 + 2 * 4_194_304 + 16_777_216 == 41_943_040
    assert s.layer_params[0].mlp == 3 * 4096 * 14336 == 176_160_768
    assert s.layer_params[0].norms == 2 * 4096
    assert s.embedding_params == 128256 * 4096 == 525_336_576
    assert s.final_norm_params == 4096
    assert s.extra_params == 0


def test_llama_3_2_1b_tied_embeddings() -> None:
    # head_dim 64 given explicitly; tie_word_embeddings true -> no separate lm_head
    expected = 128256 * 2048 + 16 * (gqa(2048, 32, 8, 64) + 3 * 2048 * 8192 + 2 * 2048) + 2048
    assert expected == 1_235_814_400
    s = spec("llama-llama-3.2-1b")
    assert s.tie_word_embeddings and s.lm_head_params == 0
    assert s.total_params == expected


@pytest.mark.parametrize(
    ("name", "dims", "published"),
    [
        ("mistral-mistral-7b-v0.1", (4096, 32, 32, 8, 128, 14336, 32000), 7_241_732_096),
        # head_dim 128, not 5120 / 32 = 160
        ("mistral-mistral-nemo-base-2407", (5120, 40, 32, 8, 128, 14336, 131072), 12_247_782_400),
        ("phi3-phi-3-mini-4k-instruct", (3072, 32, 32, 32, 96, 8192, 32064), 3_821_079_552),  # fused qkv
        ("phi3-phi-4", (5120, 40, 40, 10, 128, 17920, 100352), 14_659_507_200),
    ],
)
def test_mistral_and_phi_totals(name: str, dims: tuple[int, ...], published: int) -> None:
    expected = llama_like(*dims, tied=False)
    assert expected == published
    assert spec(name).total_params == expected


def test_qwen2_5_7b_has_qkv_bias() -> None:
    h, L, H, kv, d, inter, vocab = 3584, 28, 28, 4, 128, 18944, 152064
    qkv_bias = H * d + 2 * kv * d  # 3584 + 1024
    per_layer = gqa(h, H, kv, d) + qkv_bias + 3 * h * inter + 2 * h
    expected = 2 * vocab * h + L * per_layer + h
    assert expected == 7_615_616_512
    assert spec("qwen2-qwen2.5-7b").total_params == expected
    assert spec("qwen2-qwen2-7b").total_params == expected  # same shapes


def test_qwen3_8b_has_qk_norms() -> None:
    h, L, H, kv, d, inter, vocab = 4096, 36, 32, 8, 128, 12288, 151936
    per_layer = gqa(h, H, kv, d) + 2 * d + 3 * h * inter + 2 * h  # q_norm, k_norm over head_dim
    expected = 2 * vocab * h + L * per_layer + h
    assert expected == 8_190_735_360
    assert spec("qwen3-qwen3-8b").total_params == expected


def test_gemma2_9b_four_norms_tied() -> None:
    h, L, H, kv, d, inter, vocab = 3584, 42, 16, 8, 256, 14336, 256000
    per_layer = gqa(h, H, kv, d) + 3 * h * inter + 4 * h  # input/post-attn/pre-ffw/post-ffw norms
    expected = vocab * h + L * per_layer + h  # tied lm_head (Gemma default)
    assert expected == 9_241_705_984
    s = spec("gemma2-gemma-2-9b")
    assert s.tie_word_embeddings and s.total_params == expected


def test_gemma3_27b_text_and_siglip_tower() -> None:
    # text: vocab_size (262208) is not in the published text_config: transformers' default
    h, L, H, kv, d, inter, vocab = 5376, 62, 32, 16, 128, 21504, 262208
    per_layer = gqa(h, H, kv, d) + 2 * d + 3 * h * inter + 4 * h
    text = vocab * h + L * per_layer + h
    # SigLIP: hidden 1152, 27 layers, MLP 4304, patch 14 on 896 px, no pooling head
    vh, vl, vi = 1152, 27, 4304
    vision_layer = 4 * (vh * vh + vh) + (vh * vi + vi) + (vi * vh + vh) + 4 * vh
    tower = 3 * 14 * 14 * vh + vh + (896 // 14) ** 2 * vh + vl * vision_layer + 2 * vh
    projector = vh * h + vh  # mm_input_projection_weight + mm_soft_emb_norm
    assert text + tower + projector == 27_432_406_640
    s = spec("gemma3-gemma-3-27b-it")
    assert s.total_params - s.extra_params == text
    assert s.extra_params == tower + projector


def test_glm4_9b_attention_bias_and_four_norms() -> None:
    h, L, H, kv, d, inter, vocab = 4096, 40, 32, 2, 128, 13696, 151552
    qkv_bias = H * d + 2 * kv * d  # o_proj has no bias
    per_layer = gqa(h, H, kv, d) + qkv_bias + 3 * h * inter + 4 * h  # fused gate_up counts the same
    expected = 2 * vocab * h + L * per_layer + h
    assert expected == 9_400_279_040
    assert spec("glm4-glm-4-9b-0414").total_params == expected


def test_falcon_7b_multi_query() -> None:
    h, L, H, vocab = 4544, 32, 71, 65024
    d = h // H  # 64
    qkv = h * (h + 2 * d)  # one K and one V head
    per_layer = qkv + h * h + 2 * h * (4 * h) + 2 * h  # dense, 4h MLP (not gated), one LayerNorm w+b
    expected = vocab * h + L * per_layer + 2 * h  # tied; ln_f with bias
    assert expected == 6_921_720_704
    assert spec("falcon-falcon-7b").total_params == expected


def test_falcon_40b_new_decoder_architecture() -> None:
    h, L, H, kv, vocab = 8192, 60, 128, 8, 65024
    d = h // H
    qkv = h * (H + 2 * kv) * d
    per_layer = qkv + h * h + 2 * h * (4 * h) + 2 * 2 * h  # ln_attn and ln_mlp, w+b
    expected = vocab * h + L * per_layer + 2 * h
    assert expected == 41_303_293_952
    assert spec("falcon-falcon-40b").total_params == expected


# -------------------------------------------------------------------------------- MoE


def test_mixtral_8x7b_total_and_active() -> None:
    h, L, H, kv, d, inter, vocab, E = 4096, 32, 32, 8, 128, 14336, 32000, 8
    experts = E * 3 * h * inter
    per_layer = gqa(h, H, kv, d) + experts + h * E + 2 * h  # router h x E
    expected = 2 * vocab * h + L * per_layer + h
    assert expected == 46_702_792_704
    s = spec("mixtral-mixtral-8x7b-v0.1")
    assert s.total_params == expected
    assert (s.num_experts, s.num_experts_per_token) == (8, 2)
    assert s.active_params == expected - L * (experts - experts * 2 // 8) == 12_879_925_248


def test_qwen3_30b_a3b() -> None:
    h, L, H, kv, d, vocab, E, moe_inter = 2048, 48, 32, 4, 128, 151936, 128, 768
    per_layer = gqa(h, H, kv, d) + 2 * d + E * 3 * h * moe_inter + h * E + 2 * h
    expected = 2 * vocab * h + L * per_layer + h
    assert expected == 30_532_122_624
    assert spec("qwen3_moe-qwen3-30b-a3b").total_params == expected


def test_qwen3_next_80b_gated_deltanet_and_mtp() -> None:
    h, L, H, kv, d, vocab, E, moe_inter, shared_inter = 2048, 48, 16, 2, 256, 151936, 512, 512, 512
    hk, hv, dk, dv, kernel = 16, 32, 128, 128, 4
    gated_attn = h * H * d * 2 + 2 * h * kv * d + H * d * h + 2 * d  # q_proj carries the output gate
    conv_dim = 2 * hk * dk + hv * dv
    gdn = h * (2 * hk * dk + 2 * hv * dv) + h * 2 * hv + conv_dim * kernel + 2 * hv + dv + hv * dv * h
    moe = E * 3 * h * moe_inter + (3 * h * shared_inter + h) + h * E  # experts, shared + gate, router
    full, linear = L // 4, L - L // 4  # full_attention_interval 4: 12 attention, 36 delta-net layers
    main = 2 * vocab * h + full * (gated_attn + moe + 2 * h) + linear * (gdn + moe + 2 * h) + h
    mtp = (gated_attn + moe + 2 * h) + 2 * h * h + 3 * h  # one layer, fc, three norms
    assert main + mtp == 81_324_862_720
    s = spec("qwen3_next-qwen3-next-80b-a3b-instruct")
    assert s.total_params - s.extra_params == main
    assert s.extra_params == mtp


def test_qwen3_5_dense_hybrid_with_mtp_and_vision() -> None:
    # catalog copy of Qwen3.8-27B (model_type qwen3_5): 48 delta-net + 16 gated-attention layers
    h, L, H, kv, d, inter, vocab = 5120, 64, 24, 4, 256, 17408, 248320
    hk, hv, dk, dv, kernel = 16, 48, 128, 128, 4
    gated_attn = h * H * d * 2 + 2 * h * kv * d + H * d * h + 2 * d
    conv_dim = 2 * hk * dk + hv * dv
    gdn = h * (2 * hk * dk + 2 * hv * dv) + h * 2 * hv + conv_dim * kernel + 2 * hv + dv + hv * dv * h
    mlp = 3 * h * inter
    text = 2 * vocab * h + (L // 4) * (gated_attn + mlp + 2 * h) + (L - L // 4) * (gdn + mlp + 2 * h) + h
    mtp = (gated_attn + mlp + 2 * h) + 2 * h * h + 3 * h
    vh, depth, vi, merged, out = 1152, 27, 4304, 1152 * 4, 5120
    block = 4 * vh + (3 * vh * vh + 3 * vh) + (vh * vh + vh) + (vh * vi + vi) + (vi * vh + vh)
    vision = 3 * 2 * 16 * 16 * vh + vh + 2304 * vh + depth * block + 2 * vh
    vision += (merged * merged + merged) + (merged * out + out)  # patch merger
    assert text + mtp + vision == 27_781_427_952  # the checkpoint's safetensors total
    s = spec("qwen3_5-qwen3.8-27b")
    assert s.total_params - s.extra_params == text
    assert s.extra_params == mtp + vision


def _mla_attention(h: int, heads: int, q_rank: int | None, kv_rank: int, nope: int, rope: int, v: int) -> int:
    q = h * heads * (nope + rope) if q_rank is None else h * q_rank + q_rank + q_rank * heads * (nope + rope)
    kv_a = h * (kv_rank + rope) + kv_rank  # kv_a_proj_with_mqa + kv_a_layernorm
    kv_b = kv_rank * heads * (nope + v)
    return q + kv_a + kv_b + heads * v * h


def test_deepseek_v3_main_and_mtp() -> None:
    h, L, heads, vocab = 7168, 61, 128, 129280
    attn = _mla_attention(h, heads, 1536, 512, 128, 64, 128)
    assert attn == 187_107_328
    dense = attn + 3 * h * 18432 + 2 * h
    routed, shared = 256 * 3 * h * 2048, 3 * h * 2048
    router = h * 256 + 256  # gate + e_score_correction_bias (noaux_tc)
    moe = attn + routed + shared + router + 2 * h
    main = 3 * dense + (L - 3) * moe + 2 * vocab * h + h  # first_k_dense_replace = 3
    assert main == 671_026_419_200
    # MTP module as stored: a MoE layer, enorm, hnorm, eh_proj (2h -> h), shared_head.norm, and
    # copies of embed_tokens and shared_head.head. (The safetensors metadata, 684,531,386,000,
    # also counts the fp8 block scales.)
    mtp = moe + 3 * h + 2 * h * h + 2 * vocab * h
    assert main + mtp == 684_489_845_504
    for name in ("deepseek_v3-deepseek-v3", "deepseek_v3-deepseek-r1"):
        s = spec(name)
        assert s.total_params - s.extra_params == main
        assert s.extra_params == mtp


def test_mla_down_projections_are_whole_on_every_rank() -> None:
    # vLLM 0.33 deepseek_v2.py DeepseekV2MLAAttention: q_a_proj and kv_a_proj_with_mqa (fused_qkv_a_proj,
    # disable_tp=True) and their RMSNorms are ReplicatedLinear / RMSNorm, q_b / kv_b column- and o row-parallel;
    # SGLang 0.5.23 builds fused_qkv_a_proj_with_mqa as ReplicatedLinear too
    h, heads, q_rank, kv_rank, rope = 7168, 128, 1536, 512, 64
    s = spec("deepseek_v3-deepseek-r1")
    layer = s.layer_params[5]
    assert layer.replicated_attention == h * q_rank + h * (kv_rank + rope) == 15_138_816
    assert layer.attention == q_rank * heads * 192 + kv_rank * heads * 256 + heads * 128 * h == 171_966_464
    assert layer.norms == 2 * h + q_rank + kv_rank  # the three parts: the 187,107,328 attention params above
    assert layer.attention + layer.replicated_attention + q_rank + kv_rank == 187_107_328
    # 61 layers x 15,138,816 fp8 bytes whole on each of 8 ranks instead of an eighth each
    tp1 = estimate_weights(s, "fp8", tp=1)
    tp8 = estimate_weights(s, "fp8", tp=8)
    router_norms = 58 * h * 256 + 61 * (2 * h + q_rank + kv_rank) + h  # 16-bit, whole on every rank
    score_bias = 58 * 256  # the noaux_tc e_score_correction_bias: fp32 (vLLM's and SGLang's MoE gate)
    whole = 61 * 15_138_816 + 2 * router_norms + 4 * score_bias
    assert tp8.per_gpu_bytes * 8 - tp1.per_gpu_bytes in range(7 * whole - 8, 7 * whole + 8)

    # DeepSeek-V3.2's indexer: wq_b and wk whole and quantized, weights_proj and k_norm whole in bf16
    v32 = spec("deepseek_v32-deepseek-v3.2").layer_params[5]
    assert v32.replicated_attention == 15_138_816 + q_rank * 64 * 128 + h * 128
    assert v32.norms == 2 * h + q_rank + kv_rank + 2 * 128 + h * 64


def test_kv_heads_fewer_than_tp_ranks_are_copied() -> None:
    # vLLM 0.33 layers/linear.py QKVParallelLinear: tp_size >= total_num_kv_heads gives each rank one KV head
    # (num_kv_head_replicas = tp / heads), so K and V projections are not split past the KV heads (SGLang's
    # QKVParallelLinear is the same). Qwen3-30B-A3B: 48 layers, hidden 2048, 4 KV heads of 128, bf16.
    s = spec("qwen3_moe-qwen3-30b-a3b")
    tp4 = estimate_weights(s, "bfloat16", tp=4).per_gpu_bytes
    tp8 = estimate_weights(s, "bfloat16", tp=8).per_gpu_bytes
    # at TP 8 each rank holds 1 KV head where an even split gives it half of one
    kv_copies = 48 * 2048 * (128 + 128) * (8 - 4) // 8 * 2
    # router (2048 x 128 experts), two RMSNorms and the per-head q_norm / k_norm (RMSNorm(128)) per layer, and the
    # final norm: whole on every rank at any TP
    whole_16_bit = (48 * (2048 * 128 + 2 * 2048 + 2 * 128) + 2048) * 2
    assert tp8 - tp4 // 2 == kv_copies + whole_16_bit // 2 == 25_165_824 + 12_793_856
    # 4 KV heads over 4 ranks: nothing copied
    assert tp4 * 4 - estimate_weights(s, "bfloat16", tp=1).per_gpu_bytes == 3 * whole_16_bit


def test_deepseek_v2_and_lite() -> None:
    h, heads = 5120, 128
    attn = _mla_attention(h, heads, 1536, 512, 128, 64, 128)
    moe = attn + 160 * 3 * h * 1536 + 2 * 3 * h * 1536 + h * 160 + 2 * h  # 2 shared, no router bias
    dense = attn + 3 * h * 12288 + 2 * h
    expected = dense + 59 * moe + 2 * 102400 * h + h
    assert expected == 235_741_434_880
    assert spec("deepseek_v2-deepseek-v2").total_params == expected

    h, heads = 2048, 16  # Lite: q_lora_rank null -> a plain q_proj
    attn = _mla_attention(h, heads, None, 512, 128, 64, 128)
    moe = attn + 64 * 3 * h * 1408 + 2 * 3 * h * 1408 + h * 64 + 2 * h
    dense = attn + 3 * h * 10944 + 2 * h
    expected = dense + 26 * moe + 2 * 102400 * h + h
    assert expected == 15_706_484_224
    assert spec("deepseek_v2-deepseek-v2-lite").total_params == expected


def test_glm4_moe_lite_mla() -> None:
    # transformers' Glm4MoeLiteConfig defaults (GLM-4.7-Flash-like): MLA, first layer dense
    h, L, heads, vocab, E = 2048, 47, 20, 154880, 64
    attn = _mla_attention(h, heads, 768, 512, 192, 64, 256)
    dense = attn + 3 * h * 10240 + 2 * h
    moe = attn + E * 3 * h * 1536 + 3 * h * 1536 + (h * E + E) + 2 * h
    expected = dense + (L - 1) * moe + 2 * vocab * h + h
    assert expected == 29_943_393_920
    assert spec("synthetic/glm4_moe_lite-defaults").total_params == expected


def test_kimi_k2() -> None:
    h, heads, vocab = 7168, 64, 163840
    attn = _mla_attention(h, heads, 1536, 512, 128, 64, 128)
    dense = attn + 3 * h * 18432 + 2 * h
    moe = attn + 384 * 3 * h * 2048 + 3 * h * 2048 + h * 384 + 384 + 2 * h
    expected = dense + 60 * moe + 2 * vocab * h + h  # first_k_dense_replace = 1, no MTP layers
    assert expected == 1_026_408_232_448
    s = spec("kimi_k2-kimi-k2-instruct")
    assert s.total_params == expected and s.extra_params == 0


@pytest.mark.parametrize(
    ("name", "layers", "experts", "published"),
    [("gpt_oss-gpt-oss-20b", 24, 32, 20_914_757_184), ("gpt_oss-gpt-oss-120b", 36, 128, 116_829_156_672)],
)
def test_gpt_oss(name: str, layers: int, experts: int, published: int) -> None:
    h, H, kv, d, inter, vocab = 2880, 64, 8, 64, 2880, 201088
    attn = gqa(h, H, kv, d) + (H * d + 2 * kv * d + h) + H  # biases on q/k/v/o, sinks
    expert = h * 2 * inter + 2 * inter + inter * h + h  # gate_up + bias, down + bias
    per_layer = attn + experts * expert + (h * experts + experts) + 2 * h  # router with bias
    expected = 2 * vocab * h + layers * per_layer + h
    assert expected == published
    s = spec(name)
    assert s.total_params == expected
    # the down biases (experts x hidden) and o_proj's bias are whole on every TP rank (FusedMoE's w2_bias,
    # RowParallelLinear): counted with the norms, not split with the experts and attention
    assert s.layer_params[0].experts == experts * (expert - h)
    assert s.layer_params[0].norms == 2 * h + h + experts * h


def test_llama4_scout_text_and_vision() -> None:
    h, L, H, kv, d, vocab, E, inter = 5120, 48, 40, 8, 128, 202048, 16, 8192
    moe_layer = gqa(h, H, kv, d) + E * 3 * h * inter + 3 * h * inter + h * E + 2 * h  # + shared expert
    text = 2 * vocab * h + L * moe_layer + h  # interleave_moe_layer_step 1: every layer MoE
    vh, vl, vi = 1408, 34, 5632
    vision_layer = 4 * (vh * vh + vh) + (vh * vi + vi) + (vi * vh + vh) + 4 * vh
    tower = vh + ((336 // 14) ** 2 + 1) * vh + 3 * 14 * 14 * vh + 4 * vh + vl * vision_layer
    adapter = vi * 4096 + 4096 * 4096  # vision_adapter fc1 / fc2
    projector = 4096 * h
    assert text + tower + adapter + projector == 108_641_793_536
    s = spec("llama4-llama-4-scout-17b-16e-instruct")
    assert s.total_params - s.extra_params == text
    assert s.extra_params == tower + adapter + projector


def test_mistral_small_3_1_text_and_pixtral() -> None:
    h, L, H, kv, d, inter, vocab = 5120, 40, 32, 8, 128, 32768, 131072
    text = llama_like(h, L, H, kv, d, inter, vocab, tied=False)
    vh, vl, vi = 1024, 24, 4096
    tower = 3 * 14 * 14 * vh + vh + vl * (4 * vh * vh + 3 * vh * vi + 2 * vh)  # patch_conv, ln_pre
    projector = vh + (4 * vh) * vh + vh * h + h * h  # norm, patch_merger (2x2), linear_1, linear_2
    assert text + tower + projector == 24_011_361_280
    s = spec("mistral3-mistral-small-3.1-24b-instruct-2503")
    assert s.total_params - s.extra_params == text
    assert s.extra_params == tower + projector


def test_glm_4_5_with_mtp() -> None:
    h, L, H, kv, d, vocab, E, moe_inter = 5120, 92, 96, 8, 128, 151552, 160, 1536
    attn = gqa(h, H, kv, d) + (H * d + 2 * kv * d) + 2 * d  # q/k/v bias, q_norm/k_norm
    dense = attn + 3 * h * 12288 + 2 * h
    moe = attn + E * 3 * h * moe_inter + 3 * h * moe_inter + (h * E + E) + 2 * h
    main = 3 * dense + (L - 3) * moe + 2 * vocab * h + h  # first_k_dense_replace = 3
    mtp = moe + 3 * h + 2 * h * h + 2 * vocab * h
    assert main + mtp == 358_337_791_296
    s = spec("glm4_moe-glm-4.5")
    assert s.total_params - s.extra_params == main
    assert s.total_params == 358_337_791_296


def test_minimax_m2() -> None:
    h, L, H, kv, d, vocab, E, inter = 3072, 62, 48, 8, 128, 200064, 256, 1536
    attn = gqa(h, H, kv, d) + H * d + kv * d  # q_norm / k_norm over all heads ("per_layer")
    per_layer = attn + E * 3 * h * inter + (h * E + E) + 2 * h
    expected = 2 * vocab * h + L * per_layer + h
    assert expected == 228_689_764_864
    assert spec("minimax_m2-minimax-m2").total_params == expected


# ----------------------------------------------------------------------------- hybrids


def test_jamba_v0_1() -> None:
    h, vocab, inter, E = 4096, 65536, 14336, 16
    inner, d_state, d_conv, dt_rank = 2 * h, 16, 4, 256
    mamba = (
        h * 2 * inner  # in_proj
        + inner * d_conv
        + inner  # depthwise conv1d + bias
        + inner * (dt_rank + 2 * d_state)  # x_proj
        + dt_rank * inner
        + inner  # dt_proj + bias
        + inner * d_state
        + inner  # A_log, D
        + inner * h  # out_proj
        + dt_rank
        + 2 * d_state  # dt/b/c layernorms
    )
    attn = gqa(h, 32, 8, 128)
    moe, dense = E * 3 * h * inter + h * E, 3 * h * inter
    # attention at i % 8 == 4 (4 layers), experts at odd layers (16 layers)
    layers = 4 * attn + 28 * mamba + 16 * moe + 16 * dense + 32 * 2 * h
    expected = 2 * vocab * h + layers + h
    assert expected == 51_570_323_328
    assert spec("jamba-jamba-v0.1").total_params == expected


def test_nemotron_h_8b() -> None:
    h, vocab, inter = 4096, 131072, 21504
    heads, head_dim, d_state, groups, kernel = 128, 64, 128, 8, 4
    inner = heads * head_dim
    conv_dim = inner + 2 * groups * d_state
    mamba2 = h * (inner + conv_dim + heads) + conv_dim * kernel + conv_dim + 3 * heads + inner + inner * h
    attn = gqa(h, 32, 8, 128)
    mlp = 2 * h * inter  # relu^2, not gated
    # pattern: 24 M, 4 *, 24 -; one RMSNorm per block
    expected = 2 * vocab * h + 24 * mamba2 + 4 * attn + 24 * mlp + 52 * h + h
    assert expected == 8_100_852_736
    s = spec("nemotron_h-nemotron-h-8b-base-8k")
    assert s.total_params == expected
    assert len(s.layer_params) == 52


def test_gemma4_per_layer_embeddings_sharing_and_double_wide_mlp() -> None:
    # E2B-like Gemma 4 text config in transformers 5.24's format (not a published config)
    h, L, H, kv, vocab, inter, ple = 1536, 35, 8, 1, 262144, 6144, 256
    first_shared = L - 20
    total_layers = 0
    for i in range(L):
        d = 512 if (i + 1) % 6 == 0 or i == L - 1 else 256  # global layers (and the last) use global_head_dim
        attn = 2 * h * H * d + d  # q_proj, o_proj, q_norm
        if i < first_shared:
            attn += 2 * h * kv * d + d  # k_proj, v_proj, k_norm (shared layers have none)
        mlp = 3 * h * inter * (2 if i >= first_shared else 1) + 2 * h * ple  # double-wide; PLE gate/proj
        norms = 4 * h + 1 + h  # 4 RMSNorms, layer_scalar, post_per_layer_input_norm
        total_layers += attn + mlp + norms
    per_layer_embeddings = vocab * L * ple + h * L * ple + ple
    expected = vocab * h + total_layers + h + per_layer_embeddings  # tied lm_head
    s = spec("synthetic/gemma4-e2b-like")
    assert s.total_params == expected
    assert s.extra_params == per_layer_embeddings


def test_opt_125m() -> None:
    """facebook/opt-125m: 125,239,296 parameters (tied lm_head, learned positions)."""
    config = {
        "architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 768, "ffn_dim": 3072,
        "num_hidden_layers": 12, "num_attention_heads": 12, "vocab_size": 50272, "max_position_embeddings": 2048,
        "do_layer_norm_before": True, "word_embed_proj_dim": 768, "enable_bias": True, "torch_dtype": "float16",
    }
    s = parse_config(config)
    embed, positions = 50272 * 768, (2048 + 2) * 768
    attention = 4 * 768 * 768 + 4 * 768  # q, k, v, out with biases
    mlp = 768 * 3072 + 3072 + 3072 * 768 + 768  # fc1, fc2 with biases
    norms = 2 * 2 * 768  # two LayerNorms with bias
    assert s.total_params == embed + positions + 12 * (attention + mlp + norms) + 2 * 768 == 125_239_296
    assert s.lm_head_params == 0 and s.extra_params == s.loaded_extra_params == positions
    assert [layer.cache.num_kv_heads for layer in s.layers] == [12] * 12 and s.head_dim == 64
