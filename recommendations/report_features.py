"""The report's section on what serving features buy (`marts.feature_value`): one line per feature that says
what it saves over the workloads that use it, then every row, collapsed, with the query that reads them.

A feature is worth a line where some workload uses it: prefix caching (a shared prefix, a hit rate), KV offload
(host RAM priced), LoRA (adapters: one multi-LoRA deployment against one per adapter) and speculative decoding
(a draft at an acceptance rate) — `recommendations.feature_value` values each through the placement path.
"""

from __future__ import annotations

import html
from typing import Any

import polars as pl

from recommendations.feature_value import FEATURE_VALUE_SQL, ServingFeature
from recommendations.report_layout import details_block, gt_table

TITLE = "What serving features buy"
# what a feature's "without" side is, in words (the line under its totals)
AGAINST = {
    ServingFeature.PREFIX_CACHING: "against the engine's prefix cache off",
    ServingFeature.KV_OFFLOAD: "against the prefixes kept in the GPU pools or recomputed (no host RAM)",
    ServingFeature.LORA: "against a deployment per adapter (no multi-LoRA serving)",
    ServingFeature.SPECULATIVE: "against the same targets without the draft",
}


def feature_totals(frame: pl.DataFrame) -> pl.DataFrame:
    """Per feature: the workloads valued, and the GPUs and $/hour saved over those with both sides placed."""
    return (
        frame.group_by("feature")
        .agg(
            pl.len().alias("rows"),
            pl.col("gpus_saved").sum().alias("gpus_saved"),
            pl.col("usd_per_hour_saved").sum().alias("usd_per_hour_saved"),
            pl.col("gpus_saved").is_null().sum().alias("unplaced"),
        )
        .sort("feature")
    )


def feature_value_html(gt: Any, frame: pl.DataFrame, model: str) -> str:
    """The section: a line per feature, then the table of every row (collapsed)."""
    lines = []
    for row in feature_totals(frame).iter_rows(named=True):
        feature = ServingFeature(row["feature"])
        placed = row["rows"] - row["unplaced"]
        unplaced = f"; {row['unplaced']} without a placement on one side" if row["unplaced"] else ""
        lines.append(
            f"<li><b>{html.escape(feature.value)}</b>: {row['gpus_saved']:,} GPUs, "
            f"${row['usd_per_hour_saved'] or 0.0:,.2f}/h saved over {placed} of {row['rows']} workload x model "
            f"row(s), {html.escape(AGAINST[feature])}{unplaced}</li>"
        )
    table = (
        gt_table(gt, frame, TITLE, "the cheapest placement with and without")
        .fmt_currency(columns=["usd_per_hour_with", "usd_per_hour_without", "usd_per_hour_saved"], currency="USD")
        .sub_missing(missing_text="")
    )
    summary = f"<ul class='features'>{''.join(lines)}</ul>"
    return summary + details_block(TITLE, frame.height, table.as_raw_html(), FEATURE_VALUE_SQL, model)
