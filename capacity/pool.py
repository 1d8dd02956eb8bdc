"""The KV pool: how an engine lays blocks out and charges a sequence, and what follows from it (B_max,
the printed concurrency, the start check, the largest length that starts, the max context)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from capacity.numeric import cdiv
from capacity.spec import WINDOWED_KINDS, KVKind


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers sharing one block table (vLLM) or one token pool; `charge` says how T becomes units."""

    kind: str  # a KVKind value: full | sliding | chunked | mla | state
    num_layers: int
    window_tokens: int | None = None
    state_blocks: int | None = None  # STATE: blocks a request holds (vLLM "align" mode: 2, else 1)
    block_size: int | None = None  # tokens per block of this group when not the pool's (page unification)


UNBOUNDED_TOKENS = 1 << 50  # a "window" longer than any max_model_len: the group keeps every token


@dataclass(frozen=True, slots=True)
class ChargeTerms:
    """Units one sequence takes in a block or token pool, as terms of the context T and the
    admission length L (T for a running sequence):
    `fixed_units + per_block_groups * cdiv(T, bs) + sum(n * cdiv(min(held + in_flight, L), bs_j))`
    over `windowed` = ((n groups, tokens held beyond the in-flight tokens, block size bs_j), ...);
    a full group whose block size is not the pool's is a windowed term that holds `UNBOUNDED_TOKENS`."""

    fixed_units: int
    per_block_groups: int
    windowed: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class KVPool:
    """Capacity in engine units (blocks, tokens or bytes) and how many units a sequence takes."""

    unit: str  # "block" | "token" | "byte"
    capacity_units: int
    block_size: int  # tokens per block (1 for token/byte pools)
    groups: tuple[KVGroup, ...]
    max_num_batched_tokens: int
    unit_bytes: int  # bytes of one unit across all layers that share it
    # byte pools (plain): bytes per token of each group, and the per-sequence state
    group_bytes_per_token: tuple[int, ...] = ()
    state_bytes_per_sequence: int = 0
    swa_capacity_units: int | None = None  # SGLang hybrid SWA: the separate sliding-window pool
    swa_window_tokens: int = 0
    # tokens scheduled but not settled that a windowed group keeps blocks for (vLLM's
    # max_in_flight_tokens = concurrent batches x max_num_batched_tokens); None: one batch
    max_in_flight_tokens: int | None = None
    padded_layer_slots: int = 0  # empty layer slots the grouping added (memory the engine wastes)
    # SGLang hybrid SWA: bytes one full-pool token costs with its share of the window pool; the
    # full pool holds int(budget / this) tokens (None: capacity = budget // unit_bytes)
    swa_bytes_per_full_token: float | None = None

    @property
    def in_flight_tokens(self) -> int:
        return self.max_num_batched_tokens if self.max_in_flight_tokens is None else self.max_in_flight_tokens

    def sequence_units(self, context_tokens: int, admission_len: int | None = None) -> int:
        """Units one sequence of T tokens is charged (vLLM's admission rule for windowed groups)."""
        t = context_tokens
        if self.unit == "byte":
            total = self.state_bytes_per_sequence
            for group, per_token in zip(self.groups, self.group_bytes_per_token, strict=True):
                tokens = t
                if group.kind in WINDOWED_KINDS and group.window_tokens:
                    tokens = min(t, group.window_tokens - 1)
                total += per_token * tokens
            return total
        limit = admission_len if admission_len is not None else t
        terms = self.charge_terms()
        units = terms.fixed_units + terms.per_block_groups * cdiv(t, self.block_size)
        in_flight = self.in_flight_tokens
        for groups, held, block_size in terms.windowed:
            units += groups * cdiv(min(held + in_flight, limit), block_size)
        return units

    def charge_terms(self) -> ChargeTerms:
        """How a block or token pool charges one sequence, group by group (vLLM's admission rule).

        A state group takes its `state_blocks` (1, or 2 in vLLM's "align" mode: MambaSpec); a sliding
        group `cdiv(min(W - 1 + in_flight, L), bs) + 1` blocks (SlidingWindowSpec: the window may not
        start at a block boundary); a chunked group `cdiv(min(W + in_flight, L), bs)`
        (ChunkedLocalAttentionSpec); any other group `cdiv(T, bs)`.
        """
        fixed = per_block = 0
        windowed: dict[tuple[int, int], int] = {}
        for group in self.groups:
            bs = group.block_size or self.block_size
            if group.kind == KVKind.STATE:
                fixed += group.state_blocks or 1
            elif group.kind == KVKind.SLIDING and group.window_tokens and self.unit == "block":
                windowed[(group.window_tokens - 1, bs)] = windowed.get((group.window_tokens - 1, bs), 0) + 1
                fixed += 1
            elif group.kind == KVKind.CHUNKED and group.window_tokens and self.unit == "block":
                windowed[(group.window_tokens, bs)] = windowed.get((group.window_tokens, bs), 0) + 1
            elif bs != self.block_size:
                windowed[(UNBOUNDED_TOKENS, bs)] = windowed.get((UNBOUNDED_TOKENS, bs), 0) + 1
            else:
                per_block += 1
        return ChargeTerms(fixed, per_block, tuple((n, held, bs) for (held, bs), n in sorted(windowed.items())))


def max_concurrency(pool: KVPool, context_tokens: int) -> float:
    """Sequences of T tokens the pool holds, as the engine prints it ("Maximum concurrency")."""
    units = pool.sequence_units(context_tokens, context_tokens)
    if units <= 0:
        return math.inf
    concurrency = pool.capacity_units / units
    if pool.swa_capacity_units is not None:
        swa = _sglang_swa_units(pool, context_tokens)
        if swa:
            concurrency = min(concurrency, pool.swa_capacity_units / swa)
    return concurrency


def _sglang_swa_units(pool: KVPool, context_tokens: int) -> int:
    return min(context_tokens, pool.swa_window_tokens) if pool.swa_window_tokens else 0


def b_max(pool: KVPool, context_tokens: int, max_num_seqs: int | None = None, max_model_len: int | None = None) -> int:
    """Whole sequences of T tokens that fit at once, capped by the engine's max_num_seqs."""
    if max_model_len is not None and context_tokens > max_model_len:
        return 0
    units = pool.sequence_units(context_tokens, context_tokens)
    memory_bound = pool.capacity_units // units if units > 0 else 0
    if pool.swa_capacity_units is not None:
        swa = _sglang_swa_units(pool, context_tokens)
        if swa:
            memory_bound = min(memory_bound, pool.swa_capacity_units // swa)
    return memory_bound if max_num_seqs is None else min(memory_bound, max_num_seqs)


def max_context(pool: KVPool, concurrency: int, limit_tokens: int, max_num_seqs: int | None = None) -> int:
    """The largest T (a multiple of the block size, at most `limit_tokens`) at which `concurrency`
    sequences fit; 0 when not even one block-sized sequence does."""
    if max_num_seqs is not None and concurrency > max_num_seqs:
        return 0
    step = max(1, pool.block_size)

    def fits(tokens: int) -> bool:
        return b_max(pool, tokens) >= concurrency

    if fits(limit_tokens):
        return limit_tokens
    lo, hi = 0, limit_tokens // step  # invariant: lo*step fits (or lo == 0), hi*step does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * step):
            lo = mid
        else:
            hi = mid
    return lo * step


def start_units(pool: KVPool, max_model_len: int, reserved_units: int = 0) -> int:
    """Units the engine's start check needs: one request of max_model_len plus what it holds back."""
    return pool.sequence_units(max_model_len, max_model_len) + reserved_units


def engine_starts(pool: KVPool, max_model_len: int, reserved_units: int = 0) -> bool:
    """vLLM `_check_enough_kv_cache_memory`: one request of max_model_len fits the usable pool."""
    if pool.capacity_units <= 0:
        return False
    if pool.unit == "byte":
        return pool.capacity_units >= pool.sequence_units(max_model_len)
    return pool.capacity_units >= start_units(pool, max_model_len, reserved_units)


def largest_starting_len(pool: KVPool, limit_tokens: int, reserved_units: int = 0) -> int:
    """vLLM `_estimate_max_model_len_from_groups` / `_auto_fit_max_model_len`: the largest
    max_model_len in [1, limit] that starts, by bisection over tokens; 0 when not even one does."""
    if not engine_starts(pool, 1, reserved_units):
        return 0
    lo, hi = 1, limit_tokens
    if engine_starts(pool, hi, reserved_units):
        return hi
    while hi - lo > 1:  # lo starts, hi does not
        mid = (lo + hi) // 2
        if engine_starts(pool, mid, reserved_units):
            lo = mid
        else:
            hi = mid
    return lo


