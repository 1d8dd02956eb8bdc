"""The KV pool: how an engine lays blocks out and charges a sequence, and what follows from it.

A pool counts blocks (vLLM, TensorRT-LLM), tokens (SGLang, a page of tokens per unit) or bytes (the
plain formula); `PoolUnit` says which. Whatever the unit, a sequence's charge is one shape of terms
(`ChargeTerms`), and every rule that follows from the pool -- units for T tokens, B_max, the printed
concurrency, the start check, the largest length that starts, the max context -- is written once on
`PoolTerms`, whose fields are Python integers (the estimate) or Polars expressions (the grid's columns).
SGLang's second pool (the sliding-window pool of hybrid SWA models, or the Mamba state slots) is part
of the terms: a sequence holds min(T, W) of its units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from capacity.kv.kinds import group_charge
from capacity.numeric import Num, at_least, bisect_step, both, cdiv, choose, minimum
from capacity.spec import KVKind


class PoolUnit(StrEnum):
    """What one unit of a pool is (a `StrEnum`: it prints and compares as its value)."""

    BLOCK = "block"  # a block of `block_size` tokens in every layer of a group (vLLM, TensorRT-LLM)
    TOKEN = "token"  # one token slot (SGLang; capacity counted in pages of `block_size`)
    BYTE = "byte"  # one byte (the plain formula: no blocks)


@dataclass(frozen=True, slots=True)
class KVGroup:
    """Layers sharing one block table (vLLM) or one token pool; `charge` says how T becomes units."""

    kind: KVKind  # its charge is the kind class's (`capacity.kv.kinds.group_charge`)
    num_layers: int
    window_tokens: int | None = None
    state_blocks: int | None = None  # STATE: blocks a request holds (vLLM "align" mode: 2, else 1)
    block_size: int | None = None  # tokens per block of this group when not the pool's (page unification)


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

    unit: PoolUnit
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
    # SGLang hybrid SWA: the window `validate_swa_pool_size` holds the SWA pool to (the config's sliding_window;
    # 0 where the pool's layers are chunked, not sliding: Llama 4's config has none, so no check)
    swa_floor_tokens: int = 0
    stage: int = 0  # the pipeline stage whose ranks hold this pool (the index of its budget)

    @property
    def in_flight_tokens(self) -> int:
        return self.max_num_batched_tokens if self.max_in_flight_tokens is None else self.max_in_flight_tokens

    def sequence_units(self, context_tokens: int, admission_len: int | None = None) -> int:
        """Units one sequence of T tokens is charged (vLLM's admission rule for windowed groups)."""
        units: int = self.terms().sequence_units(context_tokens, admission_len)
        return units

    def terms(self) -> PoolTerms:
        """The pool as the arithmetic every pool rule reads (`PoolTerms`), in Python integers."""
        terms = self.charge_terms()
        return PoolTerms(
            self.capacity_units,
            self.block_size,
            terms.fixed_units,
            terms.per_block_groups,
            terms.windowed,
            0 if self.unit is PoolUnit.BYTE else self.in_flight_tokens,
            self.swa_capacity_units or 0,
            self.swa_window_tokens if self.swa_capacity_units is not None else 0,
        )

    def charge_terms(self) -> ChargeTerms:
        """How the pool charges one sequence, group by group (vLLM's admission rule for blocks).

        A state group takes its `state_blocks` (1, or 2 in vLLM's "align" mode: MambaSpec); a sliding
        group `cdiv(min(W - 1 + in_flight, L), bs) + 1` blocks (SlidingWindowSpec: the window may not
        start at a block boundary); a chunked group `cdiv(min(W + in_flight, L), bs)`
        (ChunkedLocalAttentionSpec); any other group `cdiv(T, bs)`. A token pool charges every group
        T tokens; a byte pool a group's bytes per token for each token it keeps (W - 1 for a window,
        transformers' cache) and the state per sequence.
        """
        if self.unit is PoolUnit.BYTE:
            return self._byte_charge_terms()
        fixed = per_block = 0
        windowed: dict[tuple[int, int], int] = {}
        blocks = self.unit is PoolUnit.BLOCK
        for group in self.groups:
            bs = group.block_size or self.block_size
            charge = group_charge(group.kind).charge(
                group.window_tokens, group.state_blocks, bs, self.block_size, blocks
            )
            fixed += charge.fixed_units
            per_block += charge.per_block_groups
            if charge.windowed is not None:
                windowed[charge.windowed] = windowed.get(charge.windowed, 0) + 1
        return ChargeTerms(fixed, per_block, tuple((n, held, bs) for (held, bs), n in sorted(windowed.items())))

    def _byte_charge_terms(self) -> ChargeTerms:
        """A byte pool's terms: blocks of one token, a group's bytes per token as its count."""
        per_token_bytes = 0
        windowed: list[tuple[int, int, int]] = []
        for group, per_token in zip(self.groups, self.group_bytes_per_token, strict=True):
            window = group_charge(group.kind).byte_window(group.window_tokens)
            if window is not None:
                windowed.append((per_token, window, 1))
            else:
                per_token_bytes += per_token
        return ChargeTerms(self.state_bytes_per_sequence, per_token_bytes, tuple(windowed))


@dataclass(frozen=True, slots=True)
class PoolTerms:
    """A pool as arithmetic: its capacity and how a sequence is charged, each field a Python int or a
    Polars expression (a grid column), so that one definition of each rule serves both.

    `windowed` = ((count, tokens held beyond the in-flight tokens, block size), ...) (`ChargeTerms`);
    `second_capacity` / `second_window`: SGLang's second pool and what one sequence holds there at most
    (0: no second pool)."""

    capacity_units: Num
    block_size: Num
    fixed_units: Num
    per_block_groups: Num
    windowed: tuple[tuple[Num, Num, Num], ...]
    in_flight_tokens: Num
    second_capacity: Num = 0
    second_window: Num = 0

    def sequence_units(self, context_tokens: Num, admission_len: Num | None = None) -> Num:
        """`fixed + per_block * cdiv(T, bs) + sum(n * cdiv(min(held + in_flight, L), bs_j))`, L the
        admission length (T for a running sequence)."""
        t = context_tokens
        limit = t if admission_len is None else admission_len
        units = self.fixed_units + self.per_block_groups * cdiv(t, self.block_size)
        for count, held, block_size in self.windowed:
            units = units + count * cdiv(minimum(held + self.in_flight_tokens, limit), block_size)
        return units

    def second_units(self, context_tokens: Num) -> Num:
        """Units of SGLang's second pool a sequence of T tokens holds: min(T, W) (0: no second pool)."""
        return choose(self.second_window > 0, minimum(context_tokens, self.second_window), 0)

    def shared_prefix_units(self, cached_tokens: Num) -> Num:
        """Units a cached prefix of whole pages takes once for all the sequences that share it: its pages in
        each full-attention group (windowed groups and state stay each sequence's own;
        `capacity.features.prefix_caching`)."""
        return self.per_block_groups * (cached_tokens // self.block_size)

    def b_max_memory(self, context_tokens: Num, units: Num | None = None, shared_units: Num = 0) -> Num:
        """Whole sequences of T tokens the pool (and its second pool) holds at once; 0 for an empty pool.
        `units` is `sequence_units(T)` where the caller holds it already (the grid: a column); `shared_units`
        of them (a cached prefix, `shared_prefix_units`) are held once for all:
        `(capacity - shared) // (units - shared)`."""
        units = self.sequence_units(context_tokens) if units is None else units
        bound = at_least(self.capacity_units - shared_units, 0) // at_least(units - shared_units, 1)
        second = self.second_units(context_tokens)
        bound = choose(second > 0, minimum(bound, self.second_capacity // at_least(second, 1)), bound)
        return choose(both(self.capacity_units > 0, units > 0), bound, 0)

    def concurrency_ratio(self, context_tokens: Num, units: Num | None = None) -> tuple[Num, Num]:
        """(numerator, denominator) of the printed concurrency at T: the smaller of capacity / units
        and the second pool's quotient, chosen exactly (the grid rounds the quotient as Python does);
        `units` as for `b_max_memory`."""
        units = self.sequence_units(context_tokens) if units is None else units
        second = self.second_units(context_tokens)
        use_second = both(second > 0, self.second_capacity * units < self.capacity_units * second)
        return choose(use_second, self.second_capacity, self.capacity_units), choose(use_second, second, units)

    def starts(self, max_model_len: Num, reserved_units: Num = 0) -> Num:
        """vLLM `_check_enough_kv_cache_memory`: one request of max_model_len fits the usable pool
        (the pool less the units the check holds back)."""
        need = self.sequence_units(max_model_len, max_model_len) + reserved_units
        return both(self.capacity_units > 0, self.capacity_units >= need)

    def fits(self, context_tokens: Num, concurrency: Num) -> Num:
        """`concurrency` sequences of T tokens fit at once (the max-context search's test)."""
        return self.b_max_memory(context_tokens) >= concurrency

    def settle_largest_starting_len(self, lo: Num, limit_tokens: Num, reserved_units: Num = 0) -> Num:
        """The largest length that starts, from the bisection's `lo` over [1, limit]: the limit when it
        starts, `lo` when one token does, else 0."""
        one = limit_tokens * 0 + 1  # 1, shaped like the limit
        below = choose(self.starts(one, reserved_units), lo, 0)
        return choose(self.starts(limit_tokens, reserved_units), limit_tokens, below)

    def settle_max_context(self, lo: Num, concurrency: Num, limit_tokens: Num, max_num_seqs: Num = 0) -> Num:
        """The max context from the bisection's `lo` over [0, limit // bs] blocks: 0 beyond the sequence
        cap or for an empty pool, the limit where it fits, else `lo` blocks."""
        capped = both(max_num_seqs > 0, concurrency > max_num_seqs)
        empty = self.capacity_units <= 0
        within = choose(self.fits(limit_tokens, concurrency), limit_tokens, lo * self.block_size)
        return choose(capped, 0, choose(empty, 0, within))


def physical_token_slots(num_blocks: Num, block_size: Num) -> Num:
    """The token slots a pool of `num_blocks` blocks holds, whatever the requests' layers keep of them (the
    estimate's and the grid's `physical_kv_token_slots`)."""
    return num_blocks * block_size


def max_concurrency(pool: KVPool, context_tokens: int) -> float:
    """Sequences of T tokens the pool holds, as the engine prints it ("Maximum concurrency")."""
    numerator, denominator = pool.terms().concurrency_ratio(context_tokens)
    return math.inf if denominator <= 0 else numerator / denominator


def b_max(
    pool: KVPool,
    context_tokens: int,
    max_num_seqs: int | None = None,
    max_model_len: int | None = None,
    cached_tokens: int = 0,
) -> int:
    """Whole sequences of T tokens that fit at once, capped by the engine's max_num_seqs; `cached_tokens`: a
    prefix of whole pages they share (held once)."""
    if max_model_len is not None and context_tokens > max_model_len:
        return 0
    terms = pool.terms()
    memory_bound: int = terms.b_max_memory(context_tokens, None, terms.shared_prefix_units(cached_tokens))
    return memory_bound if max_num_seqs is None else min(memory_bound, max_num_seqs)


def max_context(pool: KVPool, concurrency: int, limit_tokens: int, max_num_seqs: int | None = None) -> int:
    """The largest T (a multiple of the block size, at most `limit_tokens`) at which `concurrency`
    sequences fit; 0 when not even one block-sized sequence does."""
    if max_num_seqs is not None and concurrency > max_num_seqs:
        return 0
    terms = pool.terms()
    step = max(1, pool.block_size)
    lo, hi = 0, limit_tokens // step  # invariant: lo*step fits (or lo == 0), hi*step does not
    if not terms.fits(limit_tokens, concurrency):
        while hi - lo > 1:
            lo, hi = bisect_step(lo, hi, lambda blocks: terms.fits(blocks * step, concurrency))
    result: int = terms.settle_max_context(lo, concurrency, limit_tokens)
    return result


def start_units(pool: KVPool, max_model_len: int, reserved_units: int = 0) -> int:
    """Units the engine's start check needs: one request of max_model_len plus what it holds back."""
    return pool.sequence_units(max_model_len, max_model_len) + reserved_units


def engine_starts(pool: KVPool, max_model_len: int, reserved_units: int = 0) -> bool:
    """vLLM `_check_enough_kv_cache_memory`: one request of max_model_len fits the usable pool."""
    return bool(pool.terms().starts(max_model_len, reserved_units))


def largest_starting_len(pool: KVPool, limit_tokens: int, reserved_units: int = 0) -> int:
    """vLLM `_estimate_max_model_len_from_groups` / `_auto_fit_max_model_len`: the largest
    max_model_len in [1, limit] that starts, by bisection over tokens; 0 when not even one does."""
    terms = pool.terms()
    lo, hi = 1, limit_tokens  # lo starts, hi does not
    if terms.starts(1, reserved_units) and not terms.starts(hi, reserved_units):
        while hi - lo > 1:
            lo, hi = bisect_step(lo, hi, lambda length: terms.starts(length, reserved_units))
    result: int = terms.settle_largest_starting_len(lo, limit_tokens, reserved_units)
    return result
