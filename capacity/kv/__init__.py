"""Layer kinds as classes (`capacity.kv.kinds`): one frozen class per kind of cache a decoder layer
keeps (vLLM's `kv_cache_interface`: one spec class per kind), each answering for its bytes per token,
its per-sequence state, the tokens it keeps and how a pool charges it. This package root imports none
of its modules."""
