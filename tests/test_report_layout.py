"""The report shows every GPU and human headers (issue 24): with more GPUs than the palette has
colours (39 in the bundled catalog, 20 colours) the B_max and frontier charts used to keep an even
spread of 20 and drop the rest, B200 among them, without a word; now the lines are split over
several charts, largest first, and the frontier names the GPUs it cannot draw. Table headers are
words with their unit, not the marts' column names. The oracles: counts worked out by hand (45
lines in charts of at most 20: three of 15) and the labels' units read off the column names."""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pytest

from recommendations.report_layout import MAX_CURVES, chart_panels, column_label
from tests.conftest import require_extra


def _curves(n: int) -> pl.DataFrame:
    """n lines, line i peaking at B_max i + 1, over three contexts."""
    return pl.DataFrame(
        {
            "label": [f"gpu{i:02d} TP1" for i in range(n) for _ in range(3)],
            "gpu": [f"gpu{i:02d}" for i in range(n) for _ in range(3)],
            "tp": [1] * 3 * n,
            "pp": [1] * 3 * n,
            "context": [1024, 2048, 4096] * n,
            "b_max": [b for i in range(n) for b in (i + 1, (i + 1) // 2, (i + 1) // 4)],
        }
    )


@pytest.mark.parametrize(("lines", "sizes"), [(1, [1]), (20, [20]), (21, [11, 10]), (39, [20, 19]), (45, [15, 15, 15])])
def test_every_line_is_drawn_in_charts_of_at_most_twenty(lines: int, sizes: list[int]) -> None:
    panels = chart_panels(_curves(lines), "b_max")
    assert [p["label"].n_unique() for p in panels] == sizes
    assert all(p["label"].n_unique() <= MAX_CURVES for p in panels)
    drawn = [label for p in panels for label in p["label"].unique().to_list()]
    assert sorted(drawn) == sorted(set(_curves(lines)["label"])), "each line in exactly one chart"
    assert panels[0]["b_max"].max() == lines, "the largest first"


def test_headers_are_words_with_their_units() -> None:
    assert column_label("usd_per_hour") == "$ per hour"
    assert column_label("measured_gib") == "measured KV pool (GiB)"
    assert column_label("b_max_at_8k") == "B_max at 8k tokens"
    assert column_label("b_max_at_131,072") == "B_max at 131,072 tokens"
    assert column_label("usd_per_sequence_hour_at_8k") == "$ per sequence-hour at 8k tokens"
    assert column_label("layout") == "layout (TP x PP)"
    # names no one listed: spelled out from the name, its unit in brackets
    assert column_label("peak_fb_used_bytes") == "peak fb used (bytes)"
    assert column_label("ttft_p99_ms") == "TTFT p99 (ms)"
    assert column_label("price_source") == "price source"
    for name in (
        "kv_pool_error",
        "gpus_total",
        "usd_per_gpu_hour",
        "effective_limit",
        "in_fleet_plan",
        "n_observations",
    ):
        assert "_" not in column_label(name).replace("B_max", ""), name


def test_the_rendered_curves_name_every_gpu_b200_included() -> None:
    require_extra("report", "altair", "great_tables", "vl_convert")
    from recommendations.html_report import curves_chart

    curves = _curves(38).vstack(
        pl.DataFrame(
            {
                "label": ["b200-180gb TP1"] * 3,
                "gpu": ["b200-180gb"] * 3,
                "tp": [1] * 3,
                "pp": [1] * 3,
                "context": [1024, 2048, 4096],
                "b_max": [500, 250, 125],
            }
        ).cast(_curves(1).schema)  # type: ignore[arg-type]
    )
    data = _data(curves)
    svg = curves_chart(data)
    assert svg.count("<svg") == 2
    for label in curves["label"].unique():
        assert label in svg, label
    assert "[1 of 2, largest first]" in svg and "[2 of 2, largest first]" in svg


def _data(curves: pl.DataFrame) -> Any:
    from recommendations.html_report import ReportData

    empty = pl.DataFrame()
    return ReportData(
        run_id="r",
        run_date="2026-12-05",
        model="m",
        telemetry_source=None,
        curves=curves,
        fits=pl.DataFrame({"gpu": curves["gpu"].unique().to_list()}),
        no_fit=(),
        comparison=empty,
        band=None,
        band_calibrated=None,
        placements=empty,
        procurement=empty,
        calibration=empty,
        limits=empty,
    )


def test_the_frontier_names_the_gpus_it_cannot_draw() -> None:
    require_extra("report", "altair", "great_tables", "vl_convert")
    from recommendations.html_report import FRONTIER_SCHEMA, frontier_chart

    data = _data(_curves(3))
    frontier = pl.DataFrame(
        {
            "label": ["gpu00 TP1"] * 2,
            "gpu": ["gpu00"] * 2,
            "tp": [1, 1],
            "pp": [1, 1],
            "batch": [1, 2],
            "tpot_ms": [10.0, 12.0],
            "output_tokens_per_second": [100.0, 160.0],
            "ttft_ms": [50.0, 60.0],
        },
        schema=FRONTIER_SCHEMA,
    )
    html = frontier_chart(data.__class__(**{**data.__dict__, "frontier": frontier}))
    assert re.search(r"Not drawn \([^)]*\): gpu01, gpu02\.</p>$", html), html[-400:]
