"""How the HTML report presents the marts: a human header over each column, and every line of a chart drawn.

`chart_panels` splits a chart's lines (GPUs and layouts) into charts of at most MAX_CURVES, the
colours the palette tells apart, largest first: every GPU the grid holds is drawn, none dropped.

Column headers: what a reader sees instead of the marts' column names.

The marts keep snake_case names with their unit (`usd_per_hour`, `measured_gib`, `b_max_at_8k`),
which is what `capplan sql` shows and scripts rely on; a report table puts a human header with the
unit over the same column (`$ per hour`, `measured KV pool (GiB)`, `B_max at 8k tokens`).
`gt_table` puts those headers on a great_tables table; `details_block` collapses a long one under the query
that produces it. `column_label(name)` answers for every column: the names the report shows are listed, a name
no one has listed yet (a column added to a mart later) is spelled out by its unit suffix and words,
so no header is ever a raw identifier.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

import polars as pl

MAX_CURVES = 20  # the report's palette (tableau20) has 20 distinct colours: more lines make more charts

LABELS = {
    "gpu": "GPU",
    "gpu_name": "GPU name",
    "layout": "layout (TP x PP)",
    "gpus": "GPUs per replica",
    "tp": "TP",
    "pp": "PP",
    "b_max": "B_max (sequences per replica)",
    "usd_per_hour": "$ per hour",
    "usd_per_gpu_hour": "$ per GPU-hour",
    "usd_per_sequence_hour": "$ per sequence-hour",
    "workload": "workload",
    "workloads": "workloads",
    "model": "model",
    "weight_dtype": "weight dtype",
    "kv_dtype": "KV cache dtype",
    "replicas": "replicas",
    "gpus_total": "GPUs in total",
    "in_fleet_plan": "in the fleet plan",
    "planned_per_replica": "sequences planned per replica",
    "feasible": "feasible",
    "rank": "rank",
    "reason": "why",
    "binding": "binding limit",
    "calibrated": "calibrated",
    "nodes": "nodes",
    "gpus_used": "GPUs used",
    "gpus_bought": "GPUs bought",
    "spare_gpus": "spare GPUs",
    "deployment_id": "deployment",
    "engine_version": "engine release",
    "measured_gib": "measured KV pool (GiB)",
    "predicted_gib": "predicted KV pool (GiB)",
    "kv_pool_error": "KV pool error",
    "loo_kv_pool_error": "KV pool error, calibrated (leave-one-out)",
    "saturation": "KV cache saturation",
    "concurrency": "concurrent sequences",
    "model_limit": "model limit (tokens)",
    "memory_limit": "memory limit (tokens)",
    "calibrated_limit": "calibrated limit (tokens)",
    "effective_limit": "effective limit (tokens)",
    "scope": "scope",
    "term": "term",
    "n_observations": "observations",
    "median": "median correction",
    "mad": "MAD of the corrections",
    "ci_low": "90 % CI, low",
    "ci_high": "90 % CI, high",
}
UNITS = {  # a name's unit suffix -> the unit in the header
    "_gib": "GiB",
    "_bytes": "bytes",
    "_tokens": "tokens",
    "_ms": "ms",
    "_s": "s",
    "_pct": "%",
}
WORDS = {"usd": "$", "gpu": "GPU", "gpus": "GPUs", "kv": "KV", "tp": "TP", "pp": "PP", "ttft": "TTFT", "tpot": "TPOT"}
_PATTERNS = (
    (re.compile(r"b_max_at_(.+)"), "B_max at {} tokens"),
    (re.compile(r"usd_per_sequence_hour_at_(.+)"), "$ per sequence-hour at {} tokens"),
)


def column_label(name: str) -> str:
    """The header over column `name`: the listed label, else the name's words with its unit in brackets."""
    if name in LABELS:
        return LABELS[name]
    for pattern, template in _PATTERNS:
        found = pattern.fullmatch(name)
        if found:
            return template.format(found.group(1))
    suffix = next((s for s in UNITS if name.endswith(s)), "")
    words = " ".join(WORDS.get(word, word) for word in name.removesuffix(suffix).split("_") if word)
    return f"{words} ({UNITS[suffix]})" if suffix else words


def chart_panels(frame: pl.DataFrame, value: str) -> list[pl.DataFrame]:
    """`frame`'s lines (one per `label`) in charts of at most MAX_CURVES, by each line's peak `value`
    from the largest down: every line is drawn, none dropped for want of a colour."""
    peaks = frame.group_by("label").agg(pl.col(value).max()).sort(value, "label", descending=[True, False])
    labels = peaks["label"].to_list()
    count = math.ceil(len(labels) / MAX_CURVES)
    size = math.ceil(len(labels) / count) if count else 0
    return [frame.filter(pl.col("label").is_in(labels[i : i + size])) for i in range(0, len(labels), size or 1)]


def panel_title(title: str, index: int, panels: int) -> str:
    """A chart's title, with which of several panels it is."""
    return title if panels == 1 else f"{title} [{index + 1} of {panels}, largest first]"


def gt_table(gt: Any, frame: pl.DataFrame, title: str, subtitle: str = "") -> Any:
    """A table with a human header over each column (`report_labels.column_label`: words and units)."""
    labels = {column: column_label(column) for column in frame.columns}
    return gt.GT(frame).tab_header(title=title, subtitle=subtitle or None).cols_label(cases=labels).opt_row_striping()


def sql_literal(sql: str, model: str) -> str:
    """The query as a reader pastes it after `capplan sql` ($m filled in, for display only)."""
    return sql.replace("$m", "'" + model.replace("'", "''") + "'")


def details_block(title: str, rows: int, table: str, sql: str, model: str) -> str:
    """A long table, collapsed, with the query that produces it."""
    e = html.escape
    query = e(sql_literal(sql, model))
    return (
        f"<details><summary>{e(title)} ({rows:,} rows)</summary>"
        f"<p class='sql'>capplan sql \"{query}\"</p>{table}</details>"
    )
