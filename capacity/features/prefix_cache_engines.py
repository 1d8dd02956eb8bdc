"""Which engines cache prefixes and how each turns it off (`capacity.features.prefix_caching`'s rule per
engine), apart from the rule itself so that the deployment types can hold a `PrefixCaching` without importing
the engines."""

from __future__ import annotations

from capacity.engines.kinds import Engine
from capacity.features.prefix_caching import PrefixCacheRule

_RULES: dict[Engine, PrefixCacheRule | None] = {
    # vLLM 0.33's parser spells "off" --disable-prefix-caching (engine/arg_utils.py; earlier: --no-enable-...)
    Engine.VLLM: PrefixCacheRule(True, "--disable-prefix-caching", "vLLM 0.33 v1/core/kv_cache_manager.py"),
    Engine.SGLANG: PrefixCacheRule(True, "--disable-radix-cache", "SGLang 0.5.23 srt/mem_cache/radix_cache.py"),
    # block reuse on by default (llmapi/llm_args.py KvCacheConfig.enable_block_reuse); a hit stops one token short
    # of the prompt (cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp BlockManager::addSequence chops
    # inputLength - 1 tokens into blocks: "Ignore last token because it can't be recovered"), the cap the rule uses
    Engine.TRTLLM: PrefixCacheRule(
        True, "kv_cache_config.enable_block_reuse: false", "TensorRT-LLM kvCacheManager.cpp BlockManager::addSequence"
    ),
    Engine.PLAIN: None,  # transformers' cache: no sharing between sequences
}


def prefix_cache_rule(engine: Engine) -> PrefixCacheRule | None:
    """How `engine` caches prefixes (None: it does not)."""
    return _RULES[engine]
