"""One frozen class per layer kind, each owning its rules (vLLM's `kv_cache_interface`: one spec class
per kind that owns its page size and its charge).

- `FullAttention`: K and V for every token, heads split by TP (at least one per rank);
- `SlidingWindowAttention` / `ChunkedLocalAttention`: the same page, a window of tokens kept;
- `LatentAttention` (MLA): one latent "head" per token, replicated on every TP rank, plus the DSA
  indexer key where the model has one;
- `RecurrentState` (Mamba / gated delta net): no per-token cache, a constant state per sequence;
- `SharedKV`: reads another layer's cache, stores nothing.

`layer_cache(layer)` reads a `LayerKVSpec` once into its class (the one place its kind is compared);
`group_charge(kind)` gives the class whose block charge a pool group of that kind takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from capacity.numeric import cdiv
from capacity.spec import INDEXER_QUANT_BLOCK, KVKind, LayerKVSpec, StateMixer

UNBOUNDED_TOKENS = 1 << 50  # a "window" longer than any max_model_len: the group keeps every token


@dataclass(frozen=True, slots=True)
class Charge:
    """What one group adds to a sequence's charge: fixed units, per-block groups, and a windowed term
    (tokens held beyond the in-flight tokens, block size), or None."""

    fixed_units: int = 0
    per_block_groups: int = 0
    windowed: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class FullAttention:
    """K and V of every token (MHA / GQA / MQA)."""

    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int
    indexer_bytes_per_token: int = 0

    kind: ClassVar[KVKind] = KVKind.FULL
    stores_per_token_kv: ClassVar[bool] = True
    replicated_under_tp: ClassVar[bool] = False
    holds_state: ClassVar[bool] = False

    @property
    def window(self) -> int | None:
        """The tokens a windowed layer keeps (None: every token)."""
        return None

    def spec_key(self, keep_windows: bool) -> tuple[KVKind, int | None]:
        """The cache spec the layer has in an engine's grouping: its kind and window; windowed kinds
        read as full attention where the engine does not keep windows (vLLM without the hybrid manager)."""
        return (KVKind.FULL, None)

    def page_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one token takes in the layer's page: its bytes per token, but for packed layouts."""
        return self.bytes_per_token(kv_bytes, tp)

    @property
    def query_head_dim(self) -> float:
        """The dimension QK^T and AV multiply over per query head: (K + V) / 2."""
        return (self.k_head_dim + self.v_head_dim) / 2

    def heads_per_gpu(self, tp: int) -> int:
        """KV heads one tensor-parallel rank holds: ceil(H_kv / TP), at least one."""
        return max(1, cdiv(self.num_kv_heads, tp))

    def bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one token occupies on one GPU, the DSA indexer key included."""
        return self.heads_per_gpu(tp) * (self.k_head_dim + self.v_head_dim) * kv_bytes + self.indexer_bytes_per_token

    def state_bytes(self, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False) -> int:
        return 0

    def cached_tokens(self, context_tokens: int) -> int:
        """Tokens kept for a sequence of T tokens in a cache that drops what left the window."""
        return context_tokens

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
class SlidingWindowAttention(FullAttention):
    """K and V of the last W tokens."""

    window_tokens: int = 0

    kind: ClassVar[KVKind] = KVKind.SLIDING

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
    """Chunked-local attention (Llama 4): a window that resets per chunk."""

    kind: ClassVar[KVKind] = KVKind.CHUNKED

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """ChunkedLocalAttentionSpec: `cdiv(min(W + in_flight, L), bs)` blocks."""
        if not (window_tokens and counts_blocks):
            return FullAttention.charge(window_tokens, state_blocks, block_size, pool_block_size, counts_blocks)
        return Charge(windowed=(window_tokens, block_size))


@dataclass(frozen=True, slots=True)
class LatentAttention(FullAttention):
    """MLA: one compressed latent per token (`k_head_dim` = kv_lora_rank, `v_head_dim` = rope dim),
    not split across tensor-parallel ranks."""

    kind: ClassVar[KVKind] = KVKind.MLA
    replicated_under_tp: ClassVar[bool] = True

    @property
    def query_head_dim(self) -> float:
        """Absorbed MLA attends over the latent: its rank."""
        return self.k_head_dim

    def heads_per_gpu(self, tp: int) -> int:
        return self.num_kv_heads

    def spec_key(self, keep_windows: bool) -> tuple[KVKind, int | None]:
        return (KVKind.MLA, None)

    def page_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        """DSA layers with an 8-bit cache store the latent in the packed fp8_ds_mla layout: fp8 latent,
        one fp32 scale per 128 elements, the rope part in bf16 (656 B at DeepSeek-V3.2's 512 + 64;
        vLLM's sparse FlashMLA, SGLang's `calculate_mla_kv_cache_dim`) rather than 576 B."""
        plain = self.bytes_per_token(kv_bytes, tp)
        if not (self.indexer_bytes_per_token and kv_bytes == 1):
            return plain
        packed = self.k_head_dim + self.k_head_dim // INDEXER_QUANT_BLOCK * 4 + self.v_head_dim * 2
        return plain - (self.k_head_dim + self.v_head_dim) + packed


@dataclass(frozen=True, slots=True)
class RecurrentState:
    """Mamba / gated delta net: a constant state per sequence, nothing per token."""

    conv_state_elements: int
    recurrent_state_elements: int
    conv_kernel: int = 0
    mixer: StateMixer | None = None

    kind: ClassVar[KVKind] = KVKind.STATE
    stores_per_token_kv: ClassVar[bool] = False
    replicated_under_tp: ClassVar[bool] = False
    holds_state: ClassVar[bool] = True

    @property
    def window(self) -> int | None:
        return None

    def spec_key(self, keep_windows: bool) -> tuple[KVKind, int | None]:
        return (KVKind.STATE, None)

    def bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        return 0

    def page_bytes_per_token(self, kv_bytes: int, tp: int = 1) -> int:
        return 0

    def state_bytes(self, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False) -> int:
        """Conv state in the model dtype and recurrent state in the SSM dtype, split by TP.

        transformers caches `conv_kernel` columns of the conv input; vLLM's state shape keeps
        `conv_kernel - 1` (`mamba_utils.MambaStateShapeCalculator`: the current token is not stored),
        which `conv_without_current` selects."""
        conv_elements = self.conv_state_elements
        if conv_without_current and self.conv_kernel > 1:
            conv_elements = conv_elements // self.conv_kernel * (self.conv_kernel - 1)
        return cdiv(conv_elements, tp) * model_bytes + cdiv(self.recurrent_state_elements, tp) * ssm_bytes

    def cached_tokens(self, context_tokens: int) -> int:
        return 0

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """MambaSpec: the blocks a request holds (1, or 2 and the checkpoints in vLLM's "align" mode)."""
        return Charge(fixed_units=state_blocks or 1)

    @staticmethod
    def byte_window(window_tokens: int | None) -> int | None:
        return None


@dataclass(frozen=True, slots=True)
class SharedKV(RecurrentState):
    """Reads another layer's cache (Gemma 3n/4 KV sharing): stores nothing, neither tokens nor state."""

    kind: ClassVar[KVKind] = KVKind.SHARED
    holds_state: ClassVar[bool] = False

    def state_bytes(self, model_bytes: int, ssm_bytes: int, tp: int = 1, *, conv_without_current: bool = False) -> int:
        return 0

    @staticmethod
    def charge(
        window_tokens: int | None, state_blocks: int | None, block_size: int, pool_block_size: int, counts_blocks: bool
    ) -> Charge:
        """Never a pool group of its own (it holds nothing); read as full attention if it were."""
        return FullAttention.charge(window_tokens, state_blocks, block_size, pool_block_size, counts_blocks)


LayerCache = FullAttention | RecurrentState

_GROUP_CHARGE: dict[KVKind, type[FullAttention] | type[RecurrentState]] = {
    KVKind.FULL: FullAttention,
    KVKind.SLIDING: SlidingWindowAttention,
    KVKind.CHUNKED: ChunkedLocalAttention,
    KVKind.MLA: LatentAttention,
    KVKind.STATE: RecurrentState,
    KVKind.SHARED: SharedKV,
}


def group_charge(kind: str) -> type[FullAttention] | type[RecurrentState]:
    """The class whose `charge` a pool group of this kind (a `KVKind` or its value) takes."""
    return _GROUP_CHARGE[KVKind(kind)]


_BY_LAYER: dict[int, tuple[LayerKVSpec, LayerCache]] = {}
_BY_LAYER_LIMIT = 1 << 16


def layer_cache(layer: LayerKVSpec) -> LayerCache:
    """The layer's cache as its kind's class. Memoized by identity (the rules ask per layer, often;
    hashing a spec compares every field); the entry keeps the spec alive, so ids stay unique."""
    hit = _BY_LAYER.get(id(layer))
    if hit is not None and hit[0] is layer:
        return hit[1]
    if len(_BY_LAYER) >= _BY_LAYER_LIMIT:
        _BY_LAYER.clear()
    found = _BY_LAYER[id(layer)] = (layer, _read(layer))
    return found[1]


def _read(layer: LayerKVSpec) -> LayerCache:
    if layer.kind is KVKind.STATE:
        return RecurrentState(layer.conv_state_elements, layer.recurrent_state_elements, layer.conv_kernel, layer.mixer)
    if layer.kind is KVKind.SHARED:
        return SharedKV(0, 0)
    heads = (layer.num_kv_heads, layer.k_head_dim, layer.v_head_dim, layer.indexer_bytes_per_token)
    if layer.kind is KVKind.MLA:
        return LatentAttention(*heads)
    if layer.kind is KVKind.SLIDING and layer.window_tokens:
        return SlidingWindowAttention(*heads, window_tokens=layer.window_tokens)
    if layer.kind is KVKind.CHUNKED and layer.window_tokens:
        return ChunkedLocalAttention(*heads, window_tokens=layer.window_tokens)
    return FullAttention(*heads)
