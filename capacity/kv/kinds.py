"""One frozen class per layer kind, each holding its own fields and owning its rules (vLLM's
`kv_cache_interface`: one spec class per kind that owns its page size and its charge).

- `FullAttention`: K and V for every token, heads split by TP (at least one per rank);
- `SlidingWindowAttention` / `ChunkedLocalAttention`: the same page, a window of tokens kept;
- `LatentAttention` (MLA): one latent "head" per token, replicated on every TP rank, plus the DSA
  indexer key where the model has one;
- `RecurrentState` (Mamba / gated delta net): no per-token cache, a constant state per sequence;
- `SharedKV`: reads another layer's cache, stores nothing.

A `capacity.spec.LayerKVSpec` holds one of them as its `cache`; each reports its `KVKind` (the value
the registry's tables and the JSON contract carry). `group_charge(kind)` gives the class whose block
charge a pool group of that kind takes.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from capacity.numeric import cdiv


class KVKind(StrEnum):
    """What one decoder layer keeps per sequence: the value each layer kind class reports."""

    FULL = "full"  # K and V for every token (MHA / GQA / MQA)
    SLIDING = "sliding"  # K and V for at most a window of tokens
    CHUNKED = "chunked"  # chunked-local attention (Llama 4): a window that resets per chunk
    MLA = "mla"  # one compressed latent per token (DeepSeek-V2/V3, Kimi-K2)
    STATE = "state"  # Mamba / gated-delta-net: a constant per-sequence state, no per-token KV
    SHARED = "shared"  # reads another layer's cache, stores nothing (Gemma 3n/4 KV sharing)


class StateMixer(StrEnum):
    """Which recurrent mixer a state layer is: engines shape and checkpoint their states differently."""

    MAMBA1 = "mamba1"  # Jamba, Falcon-Mamba: conv (I, k) + SSM (I, d_state)
    MAMBA2 = "mamba2"  # Nemotron-H, Bamba, Granite-4.0-H: conv (I + 2 G d_state, k) + SSM (H, P, d_state)
    GATED_DELTA_NET = "gated-delta-net"  # Qwen3-Next, Qwen3.5: conv (2 Hk Dk + Hv Dv, k) + state (Hv, Dv, Dk)


INDEXER_QUANT_BLOCK = 128  # elements per fp32 scale of the DSA indexer key cache

# kind values read back from the registry's tables (text at the edge)
PER_TOKEN_KINDS = frozenset({KVKind.FULL, KVKind.SLIDING, KVKind.CHUNKED, KVKind.MLA})
WINDOWED_KINDS = frozenset({KVKind.SLIDING, KVKind.CHUNKED})

UNBOUNDED_TOKENS = 1 << 50  # a "window" longer than any max_model_len: the group keeps every token

# the registry's per-layer columns (models_registry.orm.ModelLayer) and their value where a kind has none
_NO_COLUMNS: dict[str, int | None] = {
    "num_kv_heads": 0,
    "k_head_dim": 0,
    "v_head_dim": 0,
    "window_tokens": None,
    "conv_state_elements": 0,
    "recurrent_state_elements": 0,
    "kv_source_layer": None,
}


@dataclass(frozen=True, slots=True)
class Charge:
    """What one group adds to a sequence's charge: fixed units, per-block groups, and a windowed term
    (tokens held beyond the in-flight tokens, block size), or None."""

    fixed_units: int = 0
    per_block_groups: int = 0
    windowed: tuple[int, int] | None = None


class LayerCache:
    """What every layer kind answers; the defaults are those of a layer that stores nothing."""

    __slots__ = ()

    kind: ClassVar[KVKind]
    stores_per_token_kv: ClassVar[bool] = False  # a cache that grows with the tokens
    replicated_under_tp: ClassVar[bool] = False  # every TP rank holds all of it (MLA)
    latent: ClassVar[bool] = False  # one compressed latent per token (MLA), not K and V
    holds_state: ClassVar[bool] = False  # a constant per-sequence state (Mamba / GDN)
    windowed: ClassVar[bool] = False  # keeps a window of tokens (sliding, chunked)
    chunked_local: ClassVar[bool] = False  # the window resets per chunk (Llama 4)

    @property
    def window(self) -> int | None:
        """The tokens a windowed layer keeps (None: every token, or none)."""
        return None

    @property
    def kv_elements_per_token(self) -> int:
        """Elements cached per token in this layer (0 for state and shared layers)."""
        return 0

    @property
    def indexer_bytes_per_token(self) -> int:
        """DeepSeek sparse attention's indexer key per token (0 without one)."""
        return 0

    @property
    def state_mixer(self) -> StateMixer | None:
        """The recurrent mixer of a state layer (None for every other kind)."""
        return None

    @property
    def query_head_dim(self) -> float:
        """The dimension QK^T and AV multiply over per query head (0: no attention)."""
        return 0.0

    @property
    def shape_key(self) -> Hashable:
        """What every per-layer rule reads of this layer: layers with equal keys count as one shape
        (`capacity.parallel.stage_layer_counts`)."""
        return self

    def spec_key(self, keep_windows: bool) -> tuple[KVKind, int | None]:
        """The cache spec the layer has in an engine's grouping: its kind and window; windowed kinds
        read as full attention where the engine does not keep windows (vLLM without the hybrid manager)."""
        return (self.kind, None)

    def heads_per_gpu(self, tp: int) -> int:
        """KV heads one tensor-parallel rank holds."""
        return 1

    def uneven_kv_heads(self, tp: int) -> int | None:
        """The KV heads when TP and they divide neither the other (engines refuse), else None."""
        return None

    def bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one token occupies on one GPU."""
        return 0

    def page_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one token takes in the layer's page: its bytes per token, but for packed layouts."""
        return self.bytes_per_token(kv_bytes, tp)

    def state_bytes(self, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False) -> int:
        """Constant per-sequence state on one GPU."""
        return 0

    def cached_tokens(self, context_tokens: int) -> int:
        """Tokens kept for a sequence of T tokens in a cache that drops what left the window."""
        return 0

    def describe(self) -> str:
        """The layer's line in `capplan estimate`'s derivation."""
        raise NotImplementedError

    def columns(self) -> dict[str, int | None]:
        """The registry's per-layer columns (`models_registry.orm.ModelLayer`), kind aside."""
        return dict(_NO_COLUMNS)

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """`cdiv(T, bs)` blocks (FullAttentionSpec); a group whose block is not the pool's is a window
        that holds every token."""
        if block_size != pool_block_size:
            return Charge(windowed=(UNBOUNDED_TOKENS, block_size))
        return Charge(per_block_groups=1)

    @staticmethod
    def byte_window(window_tokens: int | None) -> int | None:
        """Tokens a cache that drops what left the window keeps at most (None: every token)."""
        return None


@dataclass(frozen=True, slots=True)
class FullAttention(LayerCache):
    """K and V of every token (MHA / GQA / MQA)."""

    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int

    kind: ClassVar[KVKind] = KVKind.FULL
    stores_per_token_kv: ClassVar[bool] = True

    @property
    def kv_elements_per_token(self) -> int:
        return self.num_kv_heads * (self.k_head_dim + self.v_head_dim)

    @property
    def query_head_dim(self) -> float:
        """The dimension QK^T and AV multiply over per query head: (K + V) / 2."""
        return (self.k_head_dim + self.v_head_dim) / 2

    def spec_key(self, keep_windows: bool) -> tuple[KVKind, int | None]:
        return (KVKind.FULL, None)

    def heads_per_gpu(self, tp: int) -> int:
        """ceil(H_kv / TP), at least one."""
        return max(1, cdiv(self.num_kv_heads, tp))

    def uneven_kv_heads(self, tp: int) -> int | None:
        heads = self.num_kv_heads
        return heads if heads and heads % tp and tp % heads else None

    def bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        return self.heads_per_gpu(tp) * (self.k_head_dim + self.v_head_dim) * kv_bytes

    def cached_tokens(self, context_tokens: int) -> int:
        return context_tokens

    def describe(self) -> str:
        window = f", window {self.window:,}" if self.window else ""
        heads = f"{self.num_kv_heads} KV heads x (K {self.k_head_dim} + V {self.v_head_dim})"
        return f"{self.kind.value}: {heads}{window}"

    def columns(self) -> dict[str, int | None]:
        heads = {"num_kv_heads": self.num_kv_heads, "k_head_dim": self.k_head_dim, "v_head_dim": self.v_head_dim}
        return {**_NO_COLUMNS, **heads, "window_tokens": self.window}


@dataclass(frozen=True, slots=True)
class SlidingWindowAttention(FullAttention):
    """K and V of the last W tokens."""

    window_tokens: int

    kind: ClassVar[KVKind] = KVKind.SLIDING
    windowed: ClassVar[bool] = True

    @property
    def window(self) -> int | None:
        return self.window_tokens

    def spec_key(self, keep_windows: bool) -> tuple[KVKind, int | None]:
        return (self.kind, self.window_tokens) if keep_windows else (KVKind.FULL, None)

    def cached_tokens(self, context_tokens: int) -> int:
        """transformers keeps W - 1 tokens of a sliding layer."""
        return min(context_tokens, self.window_tokens - 1)

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """SlidingWindowSpec: `cdiv(min(W - 1 + in_flight, L), bs) + 1` blocks (+1: the window may not
        start at a block boundary); a token pool keeps every token."""
        if not (window_tokens and counts_blocks):
            return FullAttention.charge(window_tokens, state_blocks, block_size, pool_block_size, counts_blocks)
        return Charge(fixed_units=1, windowed=(window_tokens - 1, block_size))

    @staticmethod
    def byte_window(window_tokens: int | None) -> int | None:
        return window_tokens - 1 if window_tokens else None


@dataclass(frozen=True, slots=True)
class ChunkedLocalAttention(SlidingWindowAttention):
    """Chunked-local attention (Llama 4): a window (`window_tokens`, the chunk size) that resets per chunk."""

    kind: ClassVar[KVKind] = KVKind.CHUNKED
    chunked_local: ClassVar[bool] = True

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """ChunkedLocalAttentionSpec: `cdiv(min(W + in_flight, L), bs)` blocks."""
        if not (window_tokens and counts_blocks):
            return FullAttention.charge(window_tokens, state_blocks, block_size, pool_block_size, counts_blocks)
        return Charge(windowed=(window_tokens, block_size))


@dataclass(frozen=True, slots=True)
class LatentAttention(LayerCache):
    """MLA: one compressed latent per token (kv_lora_rank + the rope part), not split across
    tensor-parallel ranks; with DeepSeek sparse attention also the lightning indexer's key per token.

    The latent is stored as one "head" (the registry's columns: 1 KV head, K = kv_lora_rank, V = the
    rope dim), so `kv_elements_per_token` is 576 for DeepSeek-V3, with no factor 2 and no dependence
    on the attention head count."""

    kv_lora_rank: int
    rope_head_dim: int
    indexer_head_dim: int = 0
    # the projections around the latent, for engines that keep absorbed copies of them (vLLM 0.7.x V0 MLA):
    # q's input width (q_lora_rank, or hidden_size without one), qk_nope_head_dim, v_head_dim; 0: not read
    q_input_dim: int = 0
    nope_head_dim: int = 0
    v_head_dim: int = 0
    # the config's num_key_value_heads (else its attention heads): the heads whose K and V engines without an MLA
    # cache store per token (vLLM before 0.7.1, `engines.vllm.releases.mla_heads_layout`); 0: not read
    config_kv_heads: int = 0

    kind: ClassVar[KVKind] = KVKind.MLA
    stores_per_token_kv: ClassVar[bool] = True
    replicated_under_tp: ClassVar[bool] = True
    latent: ClassVar[bool] = True

    @property
    def kv_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.rope_head_dim

    @property
    def indexer_bytes_per_token(self) -> int:
        """fp8 elements and one fp32 scale per 128 of them, one vector per token, not split by TP (vLLM
        DeepseekV32IndexerCache, SGLang's index buffer)."""
        if not self.indexer_head_dim:
            return 0
        return self.indexer_head_dim + self.indexer_head_dim // INDEXER_QUANT_BLOCK * 4

    @property
    def query_head_dim(self) -> float:
        """Absorbed MLA attends over the latent: its rank."""
        return self.kv_lora_rank

    def bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """The whole latent on every rank, the DSA indexer key included (replicated like the latent)."""
        return self.kv_elements_per_token * kv_bytes + self.indexer_bytes_per_token

    def page_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """DSA layers with an 8-bit cache store the latent in the packed fp8_ds_mla layout: fp8 latent,
        one fp32 scale per 128 elements, the rope part in bf16 (656 B at DeepSeek-V3.2's 512 + 64;
        vLLM's sparse FlashMLA, SGLang's `calculate_mla_kv_cache_dim`) rather than 576 B."""
        plain = self.bytes_per_token(kv_bytes, tp)
        if not (self.indexer_bytes_per_token and kv_bytes == 1):
            return plain
        packed = self.kv_lora_rank + self.kv_lora_rank // INDEXER_QUANT_BLOCK * 4 + self.rope_head_dim * 2
        return plain - self.kv_elements_per_token + packed

    def cached_tokens(self, context_tokens: int) -> int:
        return context_tokens

    def describe(self) -> str:
        return f"mla: latent {self.kv_lora_rank} + rope {self.rope_head_dim}"

    def columns(self) -> dict[str, int | None]:
        return {**_NO_COLUMNS, "num_kv_heads": 1, "k_head_dim": self.kv_lora_rank, "v_head_dim": self.rope_head_dim}


@dataclass(frozen=True, slots=True)
class StateTerms:
    """One state layer's per-sequence bytes on one GPU, every factor kept, so the derivation shows them."""

    conv_elements: int  # the conv state as the engine stores it (kernel - 1 columns where `kernel` is set)
    kernel: int  # the conv window where a column was dropped (conv_elements = channels x (kernel - 1)), else 0
    tp: int
    conv_element_bytes: int  # the model dtype
    recurrent_elements: int
    recurrent_element_bytes: int  # the SSM cache dtype

    @property
    def total_bytes(self) -> int:
        return (
            cdiv(self.conv_elements, self.tp) * self.conv_element_bytes
            + cdiv(self.recurrent_elements, self.tp) * self.recurrent_element_bytes
        )

    def describe(self) -> str:
        """`conv C / TP x b + recurrent R / TP x b = N B`, each number the one `total_bytes` multiplies."""
        stored = f"{self.conv_elements:,}"
        if self.kernel:  # the engine drops the current token's column of the conv window
            whole = self.conv_elements // (self.kernel - 1) * self.kernel
            stored = f"{whole:,} x {self.kernel - 1}/{self.kernel} = {stored}"
        conv = cdiv(self.conv_elements, self.tp)
        recurrent = cdiv(self.recurrent_elements, self.tp)
        return (
            f"conv {stored} / TP {self.tp} = {conv:,} x {self.conv_element_bytes} B + recurrent "
            f"{self.recurrent_elements:,} / TP {self.tp} = {recurrent:,} x {self.recurrent_element_bytes} B = "
            f"{self.total_bytes:,} B"
        )


@dataclass(frozen=True, slots=True)
class RecurrentState(LayerCache):
    """Mamba / gated delta net: a constant state per sequence, nothing per token."""

    conv_state_elements: int  # per sequence, stored in the model dtype
    recurrent_state_elements: int  # per sequence, stored in the SSM cache dtype
    conv_kernel: int = 0  # the conv window; conv_state_elements = channels x conv_kernel (transformers)
    mixer: StateMixer | None = None
    # Mamba-2: B/C groups and the state size of each, for the groups a TP split replicates (0: none)
    mamba_groups: int = 0
    group_state_size: int = 0

    kind: ClassVar[KVKind] = KVKind.STATE
    holds_state: ClassVar[bool] = True

    @property
    def state_mixer(self) -> StateMixer | None:
        return self.mixer

    def state_terms(
        self, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False
    ) -> StateTerms:
        """Conv state in the model dtype and recurrent state in the SSM dtype, split by TP.

        transformers caches `conv_kernel` columns of the conv input; vLLM's state shape keeps
        `conv_kernel - 1` (`mamba_utils.MambaStateShapeCalculator`: the current token is not stored),
        which `conv_without_current` selects. A Mamba-2 layer with fewer B/C groups than TP ranks gets
        `tp - groups` replicated groups on top (vLLM `MambaStateShapeCalculator.extra_groups_for_head_shards`,
        0.33; SGLang 0.5.23 `Mamba2StateShape.create` the same), so every rank holds whole groups."""
        conv_elements = self.conv_state_elements
        if 0 < self.mamba_groups < tp and self.mamba_groups % tp:
            conv_elements += (tp - self.mamba_groups) * 2 * self.group_state_size * self.conv_kernel
        kept = conv_without_current and self.conv_kernel > 1
        if kept:
            conv_elements = conv_elements // self.conv_kernel * (self.conv_kernel - 1)
        return StateTerms(
            conv_elements, self.conv_kernel if kept else 0, tp, model_bytes, self.recurrent_state_elements, ssm_bytes
        )

    def state_bytes(self, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False) -> int:
        """`state_terms`' bytes on one GPU."""
        return self.state_terms(model_bytes, ssm_bytes, tp, conv_without_current=conv_without_current).total_bytes

    def describe(self) -> str:
        return f"state: conv {self.conv_state_elements:,} + recurrent {self.recurrent_state_elements:,} elements"

    def columns(self) -> dict[str, int | None]:
        states = {"conv_state_elements": self.conv_state_elements}
        return {**_NO_COLUMNS, **states, "recurrent_state_elements": self.recurrent_state_elements}

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """MambaSpec: the blocks a request holds (1, or 2 and the checkpoints in vLLM's "align" mode)."""
        return Charge(fixed_units=state_blocks or 1)


@dataclass(frozen=True, slots=True)
class SharedKV(LayerCache):
    """Reads another layer's cache (Gemma 3n/4 KV sharing): stores nothing, neither tokens nor state.
    Never a pool group of its own; read as full attention if it were (the base charge)."""

    kv_source_layer: int  # the layer whose cache this one reads

    kind: ClassVar[KVKind] = KVKind.SHARED

    @property
    def shape_key(self) -> Hashable:
        """Every shared layer has the same (empty) shape, whichever layer it reads."""
        return KVKind.SHARED

    def describe(self) -> str:
        return f"shared: reads layer {self.kv_source_layer}'s cache"

    def columns(self) -> dict[str, int | None]:
        return {**_NO_COLUMNS, "kv_source_layer": self.kv_source_layer}


_GROUP_CHARGE: dict[KVKind, type[LayerCache]] = {
    KVKind.FULL: FullAttention,
    KVKind.SLIDING: SlidingWindowAttention,
    KVKind.CHUNKED: ChunkedLocalAttention,
    KVKind.MLA: LatentAttention,
    KVKind.STATE: RecurrentState,
    KVKind.SHARED: SharedKV,
}


def group_charge(kind: str) -> type[LayerCache]:
    """The class whose `charge` (and class attributes) a pool group of this kind (a `KVKind` or its
    value) takes."""
    return _GROUP_CHARGE[KVKind(kind)]
