"""Multi-head latent attention (DeepSeek-V2/V3/R1/V3.2, Kimi-K2, GLM-4.7-Flash, unknown types with
`kv_lora_rank`): one latent "head" of `kv_lora_rank` (K) + `qk_rope_head_dim` (V) per layer."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from capacity.hf_config.family import (
    Built,
    Family,
    Kind,
    Mixer,
    Model,
    deepseek_mtp_params,
    gated_mlp,
    shared_expert_moe,
)
from capacity.hf_config.fields import MAX_DIM, MAX_EXPERTS, MAX_HEADS, MAX_LAYERS
from capacity.kv.kinds import LatentAttention
from capacity.spec import LayerKVSpec, LayerParams


class Mla(Family):
    """DeepSeek-V2's rules; `noaux_tc` routers (V3 and after) and dense first layers are attributes."""

    noaux_tc_by_default = False  # V3 / Kimi-K2: a score-correction bias (transformers 5 writes null)
    first_dense_by_default = 0  # GLM-4.7-Flash defaults to one dense layer

    def read_head_dim(self, m: Model) -> int:
        # MLA configs carry head_dim = qk_rope_head_dim: never used for KV
        return m.cfg.integer("qk_nope_head_dim") + m.cfg.integer("qk_rope_head_dim")

    def layer_kinds(self, m: Model) -> list[Kind]:
        return [Kind(Mixer.MLA)] * m.num_layers

    def build(self, m: Model, kinds: list[Kind]) -> Built:
        c = m.cfg
        kv_rank = c.integer("kv_lora_rank")
        rope = c.integer("qk_rope_head_dim")
        # DeepSeek-V3.2 sparse attention (DSA): every layer also caches its lightning indexer's key
        index_dim = c.integer("index_head_dim", 0, lo=0, hi=MAX_DIM) if m.family.sparse_indexer else 0
        q_input = c.opt_int("q_lora_rank") or m.hidden
        kv_heads = m.kv_heads  # num_key_value_heads as read (else the attention heads), before the latent's 1
        latent = LatentAttention(
            kv_rank, rope, index_dim, q_input, c.integer("qk_nope_head_dim"), c.integer("v_head_dim"), kv_heads
        )
        layers = [LayerKVSpec(i, latent) for i in range(m.num_layers)]
        m.kv_heads = 1
        params, moe_total = self._mlp_layers(m, _attention(m).plus(_indexer(m, index_dim)))
        extra = deepseek_mtp_params(m, moe_total)
        if m.family.generic:
            m.notes.append("generic path: `kv_lora_rank` present, parsed as DeepSeek-style MLA")
        return layers, params, extra

    def _mlp_layers(self, m: Model, attn: MlaParams) -> tuple[list[LayerParams], int]:
        """Per-layer parameters and the MoE layer's total (what an MTP module stores)."""
        c = m.cfg
        h = m.hidden
        n_routed = c.integer("n_routed_experts", 0, lo=0, hi=MAX_EXPERTS)
        dense = LayerParams(
            attention=attn.split,
            mlp=gated_mlp(h, m.intermediate),
            norms=2 * h + attn.norms,
            replicated_attention=attn.replicated,
        )
        if not n_routed:
            declared = c.has("n_routed_experts") and c.has("moe_intermediate_size")
            if declared and m.num_layers > c.integer("first_k_dense_replace", 0, lo=0, hi=MAX_LAYERS):
                # DeepSeek-V3 with `n_routed_experts: 0` would be planned as a 39 GB dense model
                m.fail(
                    "`n_routed_experts` is 0, but the config has MoE layers (`moe_intermediate_size`, "
                    "`first_k_dense_replace`): a model that routes tokens needs at least one expert"
                )
            return [dense] * m.num_layers, dense.total
        m.num_experts = n_routed
        m.experts_per_token = c.integer("num_experts_per_tok", hi=MAX_EXPERTS)
        if m.experts_per_token > n_routed:
            m.fail(f"`num_experts_per_tok` ({m.experts_per_token}) exceeds `n_routed_experts` ({n_routed})")
        moe_inter = c.integer("moe_intermediate_size")
        shared = c.integer("n_shared_experts", 0, lo=0, hi=MAX_EXPERTS)
        # transformers 5 may write `mlp_layer_types` ("dense" / "sparse") instead
        first_dense = c.integer("first_k_dense_replace", self.first_dense_by_default, lo=0, hi=MAX_LAYERS)
        freq = c.integer("moe_layer_freq", 1, hi=MAX_LAYERS)
        sparse = [i >= first_dense and i % freq == 0 for i in range(m.num_layers)]
        mlp_types = c.texts("mlp_layer_types")
        if mlp_types is not None:
            if len(mlp_types) != m.num_layers or not set(mlp_types) <= {"dense", "sparse"}:
                m.fail(f"`mlp_layer_types` must list 'dense'/'sparse' for each of the {m.num_layers} layers")
            sparse = [t == "sparse" for t in mlp_types]
        topk_method = c.text("topk_method", "noaux_tc" if self.noaux_tc_by_default else "greedy")
        noaux_tc = topk_method == "noaux_tc"
        moe = shared_expert_moe(m, attn.split, n_routed, moe_inter, shared, router_bias=noaux_tc)
        moe = replace(moe, norms=moe.norms + attn.norms, replicated_attention=attn.replicated)
        return [moe if is_sparse else dense for is_sparse in sparse], moe.total


class MlaNoauxTc(Mla):
    """DeepSeek-V3 / V3.2 / R1 and Kimi-K2: routers with the score-correction bias (noaux_tc)."""

    noaux_tc_by_default = True


class DeepSeekV32(MlaNoauxTc):
    sparse_indexer = True


class Glm4MoeLite(MlaNoauxTc):
    first_dense_by_default = 1


class MlaParams(NamedTuple):
    """One MLA layer's attention parameters by how the engines shard them: `split` over TP (q_b or q, kv_b, o),
    `replicated` on every rank and quantized with the projections (vLLM's and SGLang's ReplicatedLinear: the
    q_a / kv_a down-projections, DSA's wq_b and wk), `norms` on every rank in 16 bits (q_a / kv_a RMSNorms, the
    indexer's k_norm and its weights_proj, which both engines build in bf16)."""

    split: int
    replicated: int
    norms: int

    def plus(self, other: MlaParams) -> MlaParams:
        return MlaParams(self.split + other.split, self.replicated + other.replicated, self.norms + other.norms)


def _attention(m: Model) -> MlaParams:
    """q (direct or through the q_lora_rank bottleneck), kv_a, kv_a_layernorm, kv_b, o."""
    c = m.cfg
    h, heads = m.hidden, m.heads
    kv_rank = c.integer("kv_lora_rank")
    rope = c.integer("qk_rope_head_dim")
    nope = c.integer("qk_nope_head_dim")
    v = c.integer("v_head_dim")
    q_rank = c.opt_int("q_lora_rank")
    bias = c.flag("attention_bias", False)
    kv_a = h * (kv_rank + rope) + ((kv_rank + rope) if bias else 0)
    kv_b = kv_rank * heads * (nope + v)
    o = heads * v * h + (h if bias else 0)
    if q_rank is None:  # q_proj: column-parallel like q_b
        return MlaParams(h * heads * (nope + rope) + kv_b + o, kv_a, kv_rank)
    q_a = h * q_rank + (q_rank if bias else 0)
    q_b = q_rank * heads * (nope + rope)
    return MlaParams(q_b + kv_b + o, q_a + kv_a, q_rank + kv_rank)


def _indexer(m: Model, index_dim: int) -> MlaParams:
    """DSA's lightning indexer, whole on every rank: wq_b (q_lora_rank -> heads x dim) and wk (hidden -> dim),
    quantized; k_norm (LayerNorm) and weights_proj (hidden -> heads) in bf16."""
    if not index_dim:
        return MlaParams(0, 0, 0)
    c = m.cfg
    h = m.hidden
    index_heads = c.integer("index_n_heads", hi=MAX_HEADS)
    q_rank = c.integer("q_lora_rank")
    m.notes.append(f"DSA: lightning indexer key of {index_dim} per token per layer, cached as fp8 + scales")
    return MlaParams(0, q_rank * index_heads * index_dim + h * index_dim, 2 * index_dim + h * index_heads)
