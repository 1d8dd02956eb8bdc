"""The diff marts' columns, described once: marts.grid_diff (two runs) and marts.release_diff (two
releases) share them. `warehouse.sql.build_relation` applies them (DICTIONARY_COMMENTS) after each file
runs, as it does the grid's column dictionary; the key columns' words are the ones every mart shares
(capacity.columns.SHARED_DESCRIPTIONS). `capplan sql` loads this with warehouse.sql: nothing heavier."""

from capacity.columns import SHARED_DESCRIPTIONS

_SIDES = {
    "before": "before: the earlier run (marts.release_diff: the fleet's release)",
    "after": "after: the later run (marts.release_diff: the newest release)",
}
_PAIRED = {
    "engine_version": "The engine release the grid planned at",
    "b_max": "Whole sequences of this context that fit at once",
    "max_concurrency": "The engine's printed maximum concurrency",
    "kv_budget_bytes_per_gpu": "KV cache budget per GPU, in bytes",
    "kv_cache_tokens": "KV cache size in tokens, as the engine prints it",
    "fits": "Whether one sequence of this context fits",
    "tpot_ms": "Time per output token at b_max, in milliseconds",
    "usd_per_hour": "US dollars per replica-hour at that run's GPU price",
    "price_source": "Where that run's GPU price came from",
}
_KEYS = {
    **{name: SHARED_DESCRIPTIONS[name] for name in ("model", "gpu", "engine")},
    "weight_dtype": "Weight dtype as requested (--dtype).",
    "kv_dtype": "KV cache dtype as requested (--kv-cache-dtype).",
    **{name: SHARED_DESCRIPTIONS[name] for name in ("tp", "pp", "dp", "ep")},
    "context": "Tokens per sequence (prompt + output) of the row.",
    "num_gpus": "GPUs per replica (tp x pp, times dp where each DP rank is a TP group: vLLM).",
}
# a diff row's columns after change / cause, in the files' order (warehouse.sql's column set `diff_row`)
DIFF_ROW_COLUMNS = (*_KEYS, *(f"{name}_{side}" for name in _PAIRED for side in _SIDES))
DIFF_COMMENTS = {
    "change": "changed (both sides have the row), added (only the after side) or removed (only the before side).",
    "cause": "The causes joined with +: engine_release, config, catalog, price, calibration, or code.",
    **_KEYS,
    **{f"{name}_{side}": f"{text}, {label}." for name, text in _PAIRED.items() for side, label in _SIDES.items()},
    "change_pct": "The largest relative change of b_max, KV budget, TPOT and $/hour, in percent (changed rows).",
}
GRID_DIFF_COMMENTS = {
    "run_id_before": "The earlier run compared (raw.grid_inputs, marts.runs.run_id).",
    "run_id_after": "The later run compared (the latest run recorded).",
    "causes": "The inputs of this row whose fingerprints differ between the runs (code: none did).",
    **DIFF_COMMENTS,
}
RELEASE_DIFF_COMMENTS = {
    "fleet_release": "The vLLM release (minor) the fleet's deployments run.",
    "next_release": "The newest vLLM release capplan has rules for: what an upgrade reaches.",
    **DIFF_COMMENTS,
}
