"""Prefix caching as capacity: the blocks of a prompt prefix that running requests share are held once.

The rule, read from the engines' source (vLLM 0.33, SGLang 0.5.23) and TensorRT-LLM's documentation:
- only whole blocks (pages) are shared: vLLM hashes full blocks (v1/core/kv_cache_utils.py
  `get_request_block_hasher`) and `KVCacheManager.get_computed_blocks` hits whole blocks only; SGLang's radix
  cache matches `RadixKey.page_aligned(page_size)` (mem_cache/radix_cache.py `match_prefix`); TensorRT-LLM's
  block reuse shares filled blocks (docs/source/features/kvcache.md, "Reuse Across Requests"). The partial
  last block of the prefix is each request's own.
- a request never hits its whole prompt: vLLM caps the hit at `request.num_tokens - 1` (the last token is
  recomputed for its logits, `get_computed_blocks`), SGLang at `input_len - 1`
  (managers/schedule_batch.py `_compute_max_prefix_len`).
- a shared block is referenced by every request that holds it and freed with the last (block_pool.py
  `BlockPool.touch` / `free_blocks`: `ref_cnt`), so B requests of T tokens that share S tokens take
  `blocks(S) + B x (blocks(T) - blocks(S))` of each full-attention group; windowed groups and state slots
  stay per request (their blocks are freed or replaced as the window moves).
- the default: on in vLLM V1 for generative models (`--disable-prefix-caching` in 0.33, `--no-enable-prefix-caching` before, turns it off; config/model.py `is_prefix_caching_supported`), in SGLang (`--disable-radix-cache`)
  and in TensorRT-LLM's `KvCacheConfig.enable_block_reuse`; the plain formula (transformers) has none.

The hit rate (the share of prompt tokens served from the cache, what vLLM's `prefix_cache_hits /
prefix_cache_queries` measure) moves the prefill work: only the uncached tokens are prefilled. It says nothing
about which prefixes are resident together, so the memory saving comes from `shared_prefix_tokens` alone.
Each engine's `PrefixCacheRule` is `capacity.features.prefix_cache_engines.prefix_cache_rule`. Pure: no I/O;
the pool arithmetic is `capacity.pool.PoolTerms.shared_prefix_units`, over ints and Polars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capacity.numeric import Num, at_least, minimum


@dataclass(frozen=True, slots=True)
class PrefixCacheRule:
    """How one engine caches prefixes: on by default or not, and the flag that turns it off."""

    default_on: bool
    off_flag: str  # the engine's spelling of "off", for notes and the pasted command
    source: str  # where the rule was read


@dataclass(frozen=True, slots=True)
class PrefixCaching:
    """What a deployment (or a workload) says about prefix caching.

    `enabled` None: the engine's default. `shared_prefix_tokens`: a prefix every running sequence starts with
    (a system prompt, few-shot examples), held once. `hit_rate`: the share of prompt tokens served from the
    cache (stated, or measured from telemetry), which moves the prefill work, not the memory."""

    enabled: bool | None = None
    shared_prefix_tokens: int = 0
    hit_rate: float | None = None

    def problem(self) -> str | None:
        """A one-line reason the values cannot be used, else None (errors are values: spec.py raises)."""
        if self.shared_prefix_tokens < 0:
            return f"shared prefix must be >= 0 tokens, got {self.shared_prefix_tokens}"
        if self.hit_rate is not None and not (0 <= self.hit_rate <= 1 and math.isfinite(self.hit_rate)):
            return f"prefix hit rate must be in [0, 1], got {self.hit_rate:g}"
        return None

    def on(self, rule: PrefixCacheRule | None) -> bool:
        """Whether the engine (its `rule`, None: it caches no prefixes) caches them here (its default unless
        stated)."""
        if rule is None:
            return False
        return rule.default_on if self.enabled is None else self.enabled

    @property
    def stated(self) -> bool:
        """Whether anything beyond the engine's default was said (a shared prefix or a hit rate)."""
        return bool(self.shared_prefix_tokens) or self.hit_rate is not None

    def cached_tokens(self, rule: PrefixCacheRule | None, context_tokens: Num, page_tokens: Num) -> Num:
        """Tokens of the shared prefix a sequence of T tokens finds in the cache and holds in common with the
        others: whole pages of min(S, T - 1) (0 where the engine does not cache prefixes)."""
        if not self.shared_prefix_tokens or not self.on(rule):
            return 0
        hit = at_least(minimum(context_tokens - 1, self.shared_prefix_tokens), 0)
        return hit // page_tokens * page_tokens

    def hit_tokens(self, rule: PrefixCacheRule | None, prompt_tokens: int, page_tokens: int) -> int:
        """Prompt tokens one request finds in the cache: the hit rate's share (whole pages, as the engine hits),
        or the shared prefix where that is more; below the prompt (its last token is always computed)."""
        if not self.on(rule) or prompt_tokens <= 0:
            return 0
        page = max(page_tokens, 1)
        by_rate = int((self.hit_rate or 0.0) * prompt_tokens) // page * page
        shared: int = self.cached_tokens(rule, prompt_tokens, page)
        return min(max(by_rate, shared), prompt_tokens - 1)

    def prefilled_tokens(self, rule: PrefixCacheRule | None, prompt_tokens: int, page_tokens: int) -> int:
        """Prompt tokens the engine prefills per request: the rest are read from the cache."""
        return prompt_tokens - self.hit_tokens(rule, prompt_tokens, page_tokens)

    def note(self, rule: PrefixCacheRule | None, cached: int, b_max_private: int, b_max_shared: int) -> str | None:
        """The estimate's line on what the prefix cache does to B_max (None where nothing was stated)."""
        if not self.stated:
            return None
        if rule is None:
            return "prefix caching: this engine has none; the shared prefix is held by every sequence"
        if not self.on(rule):
            return f"prefix caching off ({rule.off_flag}): the shared prefix is held by every sequence"
        rate = "" if self.hit_rate is None else f"; at a {self.hit_rate:.0%} hit rate only the rest is prefilled"
        return (
            f"prefix caching: {cached:,} tokens of the {self.shared_prefix_tokens:,}-token shared prefix held once "
            f"(whole blocks, {rule.source}): B_max {b_max_private:,} -> {b_max_shared:,}{rate}"
        )


NO_PREFIX_CACHING_STATED = PrefixCaching()
