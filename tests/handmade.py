"""Hand-built ModelSpecs for tests that must not depend on the config parser."""

from __future__ import annotations

from capacity.kv.kinds import ChunkedLocalAttention, FullAttention, LatentAttention, SlidingWindowAttention
from capacity.spec import KVKind, LayerKVSpec, LayerParams, ModelSpec

_WINDOWED = {KVKind.SLIDING: SlidingWindowAttention, KVKind.CHUNKED: ChunkedLocalAttention}


def dense_spec(
    layers: int = 32,
    heads: int = 32,
    kv_heads: int = 32,
    head_dim: int = 128,
    hidden: int = 4096,
    intermediate: int = 11008,
    vocab: int = 32000,
    context: int = 32768,
    dtype: str = "bfloat16",
    kinds: list[tuple[KVKind, int | None]] | None = None,
    tied: bool = False,
) -> ModelSpec:
    """A Llama-shaped model: gated MLP, RMSNorm, optional per-layer (kind, window) pattern."""
    pattern = kinds or [(KVKind.FULL, None)] * layers
    dims = (kv_heads, head_dim, head_dim)
    layer_specs = tuple(
        LayerKVSpec(i, _WINDOWED[kind](*dims, window) if window else FullAttention(*dims))
        for i, (kind, window) in enumerate(pattern)
    )
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    params = tuple(
        LayerParams(attention=attention, mlp=3 * hidden * intermediate, norms=2 * hidden) for _ in range(layers)
    )
    return ModelSpec(
        model_type="llama",
        architecture="LlamaForCausalLM",
        family="llama",
        hidden_size=hidden,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        intermediate_size=intermediate,
        max_position_embeddings=context,
        context_limit_tokens=context,
        torch_dtype=dtype,
        tie_word_embeddings=tied,
        layers=layer_specs,
        layer_params=params,
        embedding_params=vocab * hidden,
        lm_head_params=0 if tied else vocab * hidden,
        final_norm_params=hidden,
    )


def mla_spec(layers: int = 61, kv_lora_rank: int = 512, rope_dim: int = 64, heads: int = 128) -> ModelSpec:
    """DeepSeek-V3-shaped KV (one latent of rank + rope elements per token per layer)."""
    base = dense_spec(layers=layers, heads=heads, kv_heads=heads, head_dim=rope_dim, hidden=7168,
                      intermediate=18432, vocab=129280, context=163840)
    mla_layers = tuple(LayerKVSpec(i, LatentAttention(kv_lora_rank, rope_dim)) for i in range(layers))
    return ModelSpec(**{**_fields(base), "layers": mla_layers, "model_type": "deepseek_v3", "family": "deepseek_v3"})


def _fields(spec: ModelSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}
