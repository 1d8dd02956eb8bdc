"""`capplan report`: one self-contained HTML page over the published warehouse.

`read_report(con, model)` reads what the page shows from the marts (a read-only connection);
`render_report(data)` turns it into HTML: Vega-Lite charts built with altair and rendered to inline
SVG by vl-convert (no script, no network), tables built with great-tables (inline styles). The
extra `report` (altair, great-tables, vl-convert-python) provides them; `ReportUnavailable` says
so when it is missing.

The page leads with the answers: where the model fits (per GPU, the smallest replica that holds a
sequence, its B_max and $/hour), the recommended placements and the procurement plan, and how
capplan's predictions compare with what the fleet measured. Then the charts: B_max against context
per GPU, each line labelled with its layout ("h100-sxm-80gb TP1", GPUs with identical curves share a
line that names them all; more lines than the palette's colours make several charts, none dropped), predicted vs measured KV pool with the error band, and the throughput vs
latency frontier per GPU (`frontier_frame`: output tokens/s per replica against TPOT as the batch B
grows from 1 to the memory limit B_max, from `capacity.performance` on the run's registry, for
requests of FRONTIER_INPUT_TOKENS + FRONTIER_OUTPUT_TOKENS). Long tables come last, collapsed
(`<details>`), each with the SQL that produces it (`capplan sql` runs it).
"""

from __future__ import annotations

import datetime as dt
import html
import io
import math
from dataclasses import dataclass, field
from typing import Any

import duckdb
import polars as pl

from capacity.estimate import estimate
from capacity.performance import performance
from capacity.spec import DeploymentSpec, GpuSku, SpecError
from models_registry.planning import Catalog, catalog
from recommendations.feature_value import FEATURE_VALUE_SQL
from recommendations.grid_diff import REPORT_ROWS, GridDiff, diff_html, read_diff
from recommendations.report_features import feature_value_html
from recommendations.report_layout import chart_panels, details_block, gt_table, panel_title

GIB = 1 << 30
PALETTE = "tableau20"
BAND_QUANTILE = 0.9
ANSWER_CONTEXTS = (8192, 32768)  # the B_max columns of "where it fits", with the longest context
WORST_SHOWN = 3
FITS_SHOWN = 12  # rows of "where it fits" shown open; the rest are one click away
PER_SEQUENCE = f"usd_per_sequence_hour_at_{ANSWER_CONTEXTS[0] // 1024}k"
FRONTIER_INPUT_TOKENS = 2048  # the request the frontier is drawn for: a 2k prompt, 256 generated tokens
FRONTIER_OUTPUT_TOKENS = 256
FRONTIER_SCHEMA = {
    "label": pl.String,
    "gpu": pl.String,
    "tp": pl.Int64,
    "pp": pl.Int64,
    "batch": pl.Int64,
    "tpot_ms": pl.Float64,
    "output_tokens_per_second": pl.Float64,
    "ttft_ms": pl.Float64,
}
CURVES_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    **dict.fromkeys(("label", "gpu"), pl.String),
    **dict.fromkeys(("tp", "pp", "context", "b_max"), pl.Int64),
}

# What each section reads: shown under its table, so a reader can run it with `capplan sql`.
GRID_SQL = (
    "select gpu, tp, pp, num_gpus, weight_dtype, context, b_max, fits, usd_per_hour from marts.capacity_grid "
    "where model = $m and engine = 'vllm' and kv_dtype = 'auto' and weight_dtype in ('auto', 'bf16')"
)
COMPARISON_SQL = (
    "select deployment_id, telemetry_source, model, gpu, engine_version, tp, pp, measured_kv_pool_bytes, "
    "predicted_kv_pool_bytes, kv_pool_error, loo_kv_pool_bytes, loo_kv_pool_error, measured_kv_cache_tokens, "
    "predicted_kv_cache_tokens, kv_cache_tokens_error, calibrated, calibration_scope, saturation "
    "from marts.prediction_vs_measured where measured_kv_pool_bytes is not null "
    "and predicted_kv_pool_bytes is not null order by deployment_id"
)
PLACEMENTS_SQL = (
    "select workload, model, rank, feasible, gpu, tp, pp, weight_dtype, kv_dtype, b_max, planned_per_replica, "
    "replicas, gpus_total, usd_per_hour, usd_per_sequence_hour, calibrated, in_fleet_plan, reason "
    "from marts.recommended_placements where rank = 1 or in_fleet_plan or not feasible "
    "order by workload, model, rank nulls last"
)
PROCUREMENT_SQL = (
    "select gpu, gpu_name, nodes, gpus_used, gpus_bought, spare_gpus, usd_per_gpu_hour, usd_per_hour, "
    "price_basis, price_source, array_to_string(workloads, ', ') as workloads, fleet_usd_per_hour, method, optimal "
    "from marts.procurement_plan order by usd_per_hour desc, gpu"
)
CALIBRATION_SQL = (
    "select scope, term, n_observations, median, mad, ci_low, ci_high from marts.calibration "
    "where usable and term in ('activation_peak', 'non_torch', 'kv_pool', 'kv_pool_calibrated') "
    "order by scope, term"
)
LIMITS_SQL = (
    "select gpu, tp, pp, concurrency, model_limit, memory_limit, calibrated_limit, effective_limit, binding "
    "from marts.effective_context_limits where kind = 'model_gpu_tp' and model = $m and concurrency in (8, 32) "
    "and effective_limit > 0 order by gpu, tp, pp, concurrency"
)


class ReportUnavailable(RuntimeError):
    """The report cannot be built (missing extra, missing marts, unknown model): one line."""


@dataclass(frozen=True)
class ReportData:
    run_id: str | None
    run_date: str | None
    model: str
    telemetry_source: str | None
    curves: pl.DataFrame  # label, gpu, tp, pp, context, b_max
    fits: pl.DataFrame  # per GPU: layout, gpus, $/hour, B_max at ANSWER_CONTEXTS and the longest context
    no_fit: tuple[str, ...]  # GPUs of the grid where no replica holds one sequence
    comparison: pl.DataFrame  # prediction_vs_measured rows with both KV pools
    band: float | None  # |kv_pool_error| quantile BAND_QUANTILE
    band_calibrated: float | None
    placements: pl.DataFrame
    procurement: pl.DataFrame
    calibration: pl.DataFrame
    limits: pl.DataFrame  # effective context limits of the model, per GPU x TP at concurrency 8 and 32
    frontier: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FRONTIER_SCHEMA))  # per GPU, over B
    grid_diff: GridDiff | None = None  # this model's grid rows changed since the previous run (marts.grid_diff)
    feature_value: pl.DataFrame = field(default_factory=pl.DataFrame)  # what each serving feature buys per workload


def _exists(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    row = con.execute(
        "select count(*) from duckdb_views() where schema_name = 'marts' and view_name = $t",
        {"t": table},
    ).fetchone()
    tables = con.execute(
        "select count(*) from duckdb_tables() where schema_name = 'marts' and table_name = $t",
        {"t": table},
    ).fetchone()
    return bool((row and row[0]) or (tables and tables[0]))


def _frame(con: duckdb.DuckDBPyConnection, table: str, sql: str, params: dict[str, Any] | None = None) -> pl.DataFrame:
    if not _exists(con, table):
        return pl.DataFrame()
    return con.execute(sql, params or {}).pl()


def default_model(con: duckdb.DuckDBPyConnection) -> str | None:
    """The model most observed deployments serve, else the first workload's, else the first planned."""
    for table, sql in (
        (
            "prediction_vs_measured",
            "select model from marts.prediction_vs_measured where model is not null "
            "group by model order by count(*) desc, model limit 1",
        ),
        (
            "recommended_placements",
            "select model from marts.recommended_placements where feasible order by workload, model limit 1",
        ),
        ("models", "select model from marts.models order by model limit 1"),
    ):
        if _exists(con, table):
            row = con.execute(sql).fetchone()
            if row and row[0]:
                return str(row[0])
    return None


def layout(tp: int, pp: int) -> str:
    """A replica's layout as vLLM's flags say it: TP4, TP8 PP2."""
    return f"TP{tp}" + (f" PP{pp}" if pp > 1 else "")


def _served_as_published(grid: pl.DataFrame) -> pl.DataFrame:
    """The checkpoint's own weights (`auto`, which the grid spells `bf16` for a bf16 checkpoint) on the TP
    layouts: a DP x EP row's B_max is one rank's, and it shares its GPU, TP and PP with a TP row."""
    native = "auto" if (grid["weight_dtype"] == "auto").any() else "bf16"
    rows = grid.filter(pl.col("weight_dtype") == native)
    return rows.filter(pl.col("dp") == 1) if "dp" in rows.columns else rows


def smallest_replicas(grid: pl.DataFrame) -> pl.DataFrame:
    """Per GPU, the smallest replica (fewest GPUs, then the lower TP) that holds one sequence at the
    grid's smallest context: gpu, tp, pp."""
    rows = _served_as_published(grid)
    smallest = rows["context"].min()
    return (
        rows.filter((pl.col("context") == smallest) & pl.col("fits"))
        .sort("gpu", pl.col("tp") * pl.col("pp"), "tp")
        .group_by("gpu", maintain_order=True)
        .first()
        .select("gpu", "tp", "pp")
    )


def curves_frame(grid: pl.DataFrame) -> pl.DataFrame:
    """B_max per context for each GPU at its smallest replica, labelled with the layout ("l4-24gb TP2");
    GPUs with the same curve at the same layout share one line, named after all of them."""
    if grid.is_empty():
        return pl.DataFrame(schema=CURVES_SCHEMA)
    rows = _served_as_published(grid)
    chosen = rows.join(smallest_replicas(grid), on=["gpu", "tp", "pp"], how="inner").filter(pl.col("b_max") > 0)
    groups: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], list[str]] = {}
    for gpu, part in chosen.sort("gpu", "context").group_by("gpu", maintain_order=True):
        b_max = tuple(int(b) for b in part["b_max"])
        signature = (int(part["tp"][0]), int(part["pp"][0]), tuple(int(c) for c in part["context"]), b_max)
        groups.setdefault(signature, []).append(str(gpu[0]))
    labels = {gpus[0]: f"{' = '.join(gpus)} {layout(tp, pp)}" for (tp, pp, _c, _b), gpus in groups.items()}
    return (
        chosen.filter(pl.col("gpu").is_in(list(labels)))
        .with_columns(pl.col("gpu").replace_strict(labels, default=None).alias("label"))
        .select("label", "gpu", pl.col("tp").cast(pl.Int64), pl.col("pp").cast(pl.Int64), "context", "b_max")
        .sort("label", "context")
    )


def fits_frame(grid: pl.DataFrame) -> pl.DataFrame:
    """The first answer: per GPU where the model fits, its smallest replica, what it costs and how
    many sequences it holds at ANSWER_CONTEXTS and at the longest context the grid has; cheapest
    per sequence (at the first of ANSWER_CONTEXTS) first."""
    columns = [f"b_max_at_{c // 1024}k" for c in ANSWER_CONTEXTS]
    if grid.is_empty():
        return pl.DataFrame(
            schema={
                "gpu": pl.String,
                "layout": pl.String,
                "gpus": pl.Int64,
                "usd_per_hour": pl.Float64,
                PER_SEQUENCE: pl.Float64,
                **dict.fromkeys(columns, pl.Int64),
                "longest_context": pl.Int64,
                "b_max_at_longest": pl.Int64,
            }
        )
    rows = _served_as_published(grid).join(smallest_replicas(grid), on=["gpu", "tp", "pp"], how="inner")
    longest = rows["context"].max()
    at = {c: pl.col("b_max").filter(pl.col("context") == c).first() for c in ANSWER_CONTEXTS}
    return (
        rows.group_by("gpu", "tp", "pp")
        .agg(
            pl.col("num_gpus").first().cast(pl.Int64).alias("gpus"),
            pl.col("usd_per_hour").first().alias("usd_per_hour"),
            *(at[c].cast(pl.Int64).alias(name) for c, name in zip(ANSWER_CONTEXTS, columns, strict=True)),
            pl.lit(longest).cast(pl.Int64).alias("longest_context"),
            pl.col("b_max").filter(pl.col("context") == longest).first().cast(pl.Int64).alias("b_max_at_longest"),
        )
        .with_columns(
            pl.struct("tp", "pp")
            .map_elements(lambda r: layout(r["tp"], r["pp"]), return_dtype=pl.String)
            .alias("layout")
        )
        .with_columns((pl.col("usd_per_hour") / pl.col(columns[0]).replace(0, None)).alias(PER_SEQUENCE))
        .select("gpu", "layout", "gpus", "usd_per_hour", PER_SEQUENCE, *columns, "longest_context", "b_max_at_longest")
        .sort(pl.col(PER_SEQUENCE), "gpu", nulls_last=True)
    )


def frontier_batches(b_max: int) -> list[int]:
    """1, 2, 4, ... below B_max, and B_max itself: where the frontier is evaluated."""
    batches = [1 << i for i in range(max(b_max, 1).bit_length()) if 1 << i < b_max]
    return [*batches, b_max] if b_max >= 1 else []


def frontier_frame(registry: Catalog, model_id: str, replicas: pl.DataFrame) -> pl.DataFrame:
    """Per GPU at its replica (`smallest_replicas`: gpu, tp, pp), vLLM with the checkpoint's weights
    and KV dtype: TPOT, TTFT and output tokens/s per replica at each B of `frontier_batches(B_max)`,
    B_max the memory limit for FRONTIER_INPUT + FRONTIER_OUTPUT tokens. GPUs whose bandwidth or
    TFLOPS the catalog lacks, or where the request does not fit, are left out."""
    model = registry.models.get(model_id)
    rows: list[dict[str, Any]] = []
    if model is None or replicas.is_empty():
        return pl.DataFrame(schema=FRONTIER_SCHEMA)
    prompt, out = FRONTIER_INPUT_TOKENS, FRONTIER_OUTPUT_TOKENS
    context = prompt + out
    for replica in replicas.iter_rows(named=True):
        gpu: GpuSku | None = registry.gpus.get(replica["gpu"])
        if gpu is None or gpu.memory_bandwidth_gbps is None or gpu.bf16_dense_tflops is None:
            continue
        tp, pp = int(replica["tp"]), int(replica["pp"])
        try:
            est = estimate(
                model.spec,
                DeploymentSpec(tp=tp, pp=pp, max_model_len=context),
                gpu=gpu,
                model_name=model_id,
                checkpoint_bytes=model.checkpoint_bytes,
                context_tokens=context,
            )
        except SpecError:
            continue
        if not est.fits:
            continue
        label = f"{gpu.id} {layout(tp, pp)}"
        chunk = est.pool.max_num_batched_tokens or context
        for b in frontier_batches(est.b_max):
            perf = performance(
                model.spec, est, gpu, concurrency=b, input_tokens=prompt, output_tokens=out, chunk_tokens=chunk
            )
            rows.append(
                {
                    "label": label,
                    "gpu": gpu.id,
                    "tp": tp,
                    "pp": pp,
                    "batch": b,
                    "tpot_ms": perf.tpot_ms,
                    "output_tokens_per_second": perf.output_tokens_per_second,
                    "ttft_ms": perf.ttft_ms,
                }
            )
    return pl.DataFrame(rows, schema=FRONTIER_SCHEMA)


def _registry(con: duckdb.DuckDBPyConnection, model: str) -> Catalog:
    """The run's registry rows for `model` and every GPU (what the frontier is computed from)."""
    tables = {r[0] for r in con.execute("select table_name from duckdb_tables() where schema_name = 'raw'").fetchall()}
    if not {"models", "gpus"} <= tables:
        return Catalog({}, {}, {})
    models = con.execute("select * from raw.models where repo_id = $m", {"m": model}).pl()
    return catalog(models, con.execute("select * from raw.gpus").pl())


def read_report(con: duckdb.DuckDBPyConnection, model: str | None = None) -> ReportData:
    """Everything the page shows, from the marts of the published run."""
    chosen = model or default_model(con)
    if chosen is None:
        raise ReportUnavailable("the warehouse has no models: run `capplan nightly` first")
    if _exists(con, "models"):
        known = con.execute("select count(*) from marts.models where model = $m", {"m": chosen}).fetchone()
        if not known or not known[0]:
            raise ReportUnavailable(
                f'model {chosen!r} is not in marts.models (see `capplan sql "select model from marts.models"`)'
            )
    run = (
        con.execute("select run_id, run_date from marts.runs order by started_at desc limit 1").fetchone()
        if _exists(con, "runs")
        else None
    )
    grid = _frame(con, "capacity_grid", GRID_SQL, {"m": chosen})
    comparison = _frame(con, "prediction_vs_measured", COMPARISON_SQL)
    band = _quantile(comparison, "kv_pool_error")
    band_calibrated = _quantile(comparison, "loo_kv_pool_error")
    placements = _frame(con, "recommended_placements", PLACEMENTS_SQL)
    procurement = _frame(con, "procurement_plan", PROCUREMENT_SQL)
    calibration = _frame(con, "calibration", CALIBRATION_SQL)
    limits = _frame(con, "effective_context_limits", LIMITS_SQL, {"m": chosen})
    fits = fits_frame(grid)
    changed = read_diff(con, models=[chosen], limit=REPORT_ROWS) if _exists(con, "grid_diff") else None
    sources = comparison["telemetry_source"].unique().to_list() if comparison.height else []
    return ReportData(
        run_id=str(run[0]) if run else None,
        run_date=run[1].isoformat() if run and isinstance(run[1], dt.date) else None,
        model=chosen,
        telemetry_source=",".join(sorted(str(s) for s in sources if s)) or None,
        curves=curves_frame(grid),
        fits=fits,
        no_fit=tuple(sorted(set(grid["gpu"].to_list()) - set(fits["gpu"].to_list()))) if grid.height else (),
        comparison=comparison,
        band=band,
        band_calibrated=band_calibrated,
        placements=placements,
        procurement=procurement,
        calibration=calibration,
        limits=limits,
        frontier=frontier_frame(_registry(con, chosen), chosen, smallest_replicas(grid))
        if grid.height
        else pl.DataFrame(schema=FRONTIER_SCHEMA),
        grid_diff=changed,
        feature_value=_frame(con, "feature_value", FEATURE_VALUE_SQL),
    )


def _quantile(frame: pl.DataFrame, column: str) -> float | None:
    if frame.is_empty() or column not in frame.columns:
        return None
    values = frame[column].drop_nulls().abs()
    if values.is_empty():
        return None
    value = values.quantile(BAND_QUANTILE, interpolation="higher")
    return float(value) if value is not None and math.isfinite(value) else None


# --- rendering ---------------------------------------------------------------------------------------


def _modules() -> tuple[Any, Any]:
    try:
        import altair as alt
        import great_tables as gt
        import vl_convert  # noqa: F401  (altair's SVG renderer)
    except ImportError as exc:
        raise ReportUnavailable(
            f"the report needs the extra 'report' ({exc.name} is missing): from the capplan checkout, "
            "pip install -e '.[report]' (.venv/bin/pip after the quickstart)"
        ) from None
    return alt, gt


def _svg(chart: Any) -> str:
    buffer = io.StringIO()
    chart.save(buffer, format="svg")
    return buffer.getvalue()


def _line_colors(alt: Any, title: str) -> Any:
    """A colour per line (GPU and layout), the legend in one column with its labels whole."""
    legend = alt.Legend(labelLimit=0, titleLimit=0, columns=1)
    return alt.Color("label:N", title=title, scale=alt.Scale(scheme=PALETTE), legend=legend)


def _panel_svg(chart: Any, title: str, index: int, panels: int) -> str:
    """One panel of a split line chart, sized once so that every panel of the report lines up."""
    return _svg(chart.properties(width=640, height=380, title=panel_title(title, index, panels)))


def curves_chart(data: ReportData) -> str:
    alt, _gt = _modules()
    if data.curves.is_empty():
        return "<p class='empty'>No capacity grid rows for this model (run <code>capplan nightly</code>).</p>"
    panels = chart_panels(data.curves, "b_max")
    return "".join(_curves_panel(alt, data, frame, i, len(panels)) for i, frame in enumerate(panels))


def _curves_panel(alt: Any, data: ReportData, frame: pl.DataFrame, index: int, panels: int) -> str:
    title = f"B_max vs context: {data.model} (vLLM, checkpoint weights, KV auto; one replica per line)"
    chart = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("context:Q", title="context (tokens per sequence)", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("b_max:Q", title="B_max (concurrent sequences)", scale=alt.Scale(type="log")),
            color=_line_colors(alt, "GPU and layout (the smallest replica that holds a sequence)"),
            tooltip=["label", "gpu", "tp", "pp", "context", "b_max"],
        )
    )
    return _panel_svg(chart, title, index, panels)


def frontier_chart(data: ReportData) -> str:
    """Output tokens/s per replica against TPOT, one line per GPU, a point per batch size."""
    alt, _gt = _modules()
    if data.frontier.is_empty():
        return "<p class='empty'>No GPU of the grid has the bandwidth and TFLOPS the performance model needs.</p>"
    panels = chart_panels(data.frontier, "output_tokens_per_second")
    charts = "".join(_frontier_panel(alt, data, frame, i, len(panels)) for i, frame in enumerate(panels))
    missing = sorted(set(data.fits["gpu"]) - set(data.frontier["gpu"]))
    return charts + (
        f"<p class='nofit'>Not drawn (no bandwidth or TFLOPS in the catalog, or a {FRONTIER_INPUT_TOKENS:,} + "
        f"{FRONTIER_OUTPUT_TOKENS}-token request does not fit): {html.escape(', '.join(missing))}.</p>"
        if missing
        else ""
    )


def _frontier_panel(alt: Any, data: ReportData, frame: pl.DataFrame, index: int, panels: int) -> str:
    title = (
        f"Throughput vs latency: {data.model} ({FRONTIER_INPUT_TOKENS:,} + {FRONTIER_OUTPUT_TOKENS} "
        "tokens per request, B = 1, 2, 4 ... B_max)"
    )
    chart = (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("tpot_ms:Q", title="TPOT (ms per output token)", scale=alt.Scale(type="log")),
            y=alt.Y("output_tokens_per_second:Q", title="output tokens/s per replica", scale=alt.Scale(type="log")),
            color=_line_colors(alt, "GPU and layout"),
            order="batch:Q",
            tooltip=["label", "batch", "tpot_ms", "output_tokens_per_second", "ttft_ms"],
        )
    )
    return _panel_svg(chart, title, index, panels)


def comparison_chart(data: ReportData) -> str:
    alt, _gt = _modules()
    frame = data.comparison
    if frame.is_empty():
        return "<p class='empty'>No observed deployment reported its KV pool.</p>"
    points = pl.concat(
        [
            frame.select(
                "deployment_id",
                (pl.col("measured_kv_pool_bytes") / GIB).alias("measured_gib"),
                (pl.col("predicted_kv_pool_bytes") / GIB).alias("predicted_gib"),
                pl.lit("capplan").alias("prediction"),
            ),
            frame.filter(pl.col("loo_kv_pool_bytes").is_not_null()).select(
                "deployment_id",
                (pl.col("measured_kv_pool_bytes") / GIB).alias("measured_gib"),
                (pl.col("loo_kv_pool_bytes") / GIB).alias("predicted_gib"),
                pl.lit("calibrated (leave-one-out)").alias("prediction"),
            ),
        ]
    )
    bounds = points.select(
        pl.col("measured_gib").min().alias("low"),
        pl.max_horizontal(pl.col("measured_gib").max(), pl.col("predicted_gib").max()).alias("high"),
    ).row(0)
    low = max(0.5, float(bounds[0] or 1) * 0.8)
    high = float(bounds[1] or 1) * 1.1
    band = data.band or 0.0
    steps = [low * (high / low) ** (i / 40) for i in range(41)]
    diagonal = pl.DataFrame({"measured_gib": steps, "predicted_gib": steps})
    ribbon = pl.DataFrame(
        {"measured_gib": steps, "lower": [s * (1 - band) for s in steps], "upper": [s * (1 + band) for s in steps]}
    )
    scale = alt.Scale(type="log", domain=[low, high])
    x = alt.X("measured_gib:Q", title="measured KV pool per GPU (GiB)", scale=scale)
    area = (
        alt.Chart(ribbon)
        .mark_area(opacity=0.18, color="#4c78a8")
        .encode(x=x, y=alt.Y("lower:Q", scale=scale, title="predicted KV pool per GPU (GiB)"), y2="upper:Q")
    )
    line = (
        alt.Chart(diagonal)
        .mark_line(strokeDash=[4, 4], color="#555")
        .encode(x=x, y=alt.Y("predicted_gib:Q", scale=scale))
    )
    dots = (
        alt.Chart(points)
        .mark_point(filled=True, size=60)
        .encode(
            x=x,
            y=alt.Y("predicted_gib:Q", scale=scale),
            color=alt.Color("prediction:N", title=None),
            shape=alt.Shape("prediction:N", title=None),
            tooltip=["deployment_id", "measured_gib", "predicted_gib", "prediction"],
        )
    )
    title = (
        f"Predicted vs measured KV pool, {frame.height} deployments; band: ±{band:.1%} "
        f"({int(BAND_QUANTILE * 100)} % of deployments)"
    )
    return _svg((area + line + dots).properties(width=640, height=400, title=title))


def answers_html(data: ReportData) -> dict[str, str]:
    """The short tables the page leads with: where it fits, the placements, the procurement plan."""
    _alt, gt = _modules()
    out: dict[str, str] = {}
    fits = data.fits
    if not fits.is_empty():
        longest = int(fits["longest_context"][0])
        shown = fits.drop("longest_context").rename({"b_max_at_longest": f"b_max_at_{longest:,}"})

        def fits_table(frame: pl.DataFrame, title: str) -> str:
            return str(
                gt_table(
                    gt,
                    frame,
                    title,
                    "per GPU: the smallest replica that holds one sequence, its $/hour (and per sequence), and "
                    "B_max (concurrent sequences) at each context; vLLM, checkpoint weights, KV auto",
                )
                .fmt_currency(columns=["usd_per_hour"], currency="USD")
                .fmt_currency(columns=[PER_SEQUENCE], currency="USD", decimals=4)
                .fmt_integer(columns=[c for c in frame.columns if c.startswith("b_max")])
                .sub_missing(missing_text="-")
                .as_raw_html()
            )

        out["fits"] = fits_table(shown.head(FITS_SHOWN), f"Where {data.model} fits, cheapest per sequence first")
        if shown.height > FITS_SHOWN:
            rest = shown.slice(FITS_SHOWN)
            out["fits"] += details_block(
                f"{rest.height} more GPUs",
                rest.height,
                fits_table(rest, "Where it fits (continued)"),
                GRID_SQL,
                data.model,
            )
    if data.no_fit:
        out["fits"] = out.get("fits", "") + (
            f"<p class='nofit'>Does not fit on any replica of: {html.escape(', '.join(data.no_fit))}.</p>"
        )
    placements = data.placements
    if not placements.is_empty():
        best = placements.filter((pl.col("rank") == 1) | pl.col("rank").is_null()).with_columns(
            pl.struct("tp", "pp")
            .map_elements(lambda r: layout(r["tp"], r["pp"]) if r["tp"] else None, return_dtype=pl.String)
            .alias("layout")
        )
        shown = best.select(
            "workload",
            "model",
            "gpu",
            "layout",
            "weight_dtype",
            "kv_dtype",
            "replicas",
            "gpus_total",
            "usd_per_hour",
            "in_fleet_plan",
            *(["reason"] if best["reason"].is_not_null().any() else []),
        )
        out["placements"] = (
            gt_table(gt, shown, "Recommended placements", "the cheapest feasible placement per model x workload")
            .fmt_currency(columns=["usd_per_hour"], currency="USD")
            .sub_missing(missing_text="")
            .as_raw_html()
        )
    if not data.procurement.is_empty():
        first = data.procurement.row(0, named=True)
        subtitle = (
            f"fleet: {int(data.procurement['gpus_bought'].sum())} GPUs, ${first['fleet_usd_per_hour']:,.2f}/hour "
            f"({first['method']}, {'optimal' if first['optimal'] else 'not proven optimal'})"
        )
        out["procurement"] = (
            gt_table(gt, data.procurement.drop("fleet_usd_per_hour", "method", "optimal"), "Procurement plan", subtitle)
            .fmt_currency(columns=["usd_per_gpu_hour", "usd_per_hour"], currency="USD")
            .sub_missing(missing_text="")
            .as_raw_html()
        )
    return out


def details_html(data: ReportData) -> list[str]:
    """The long tables, collapsed, each with its SQL."""
    _alt, gt = _modules()
    out: list[str] = []
    if not data.comparison.is_empty():
        shown = data.comparison.select(
            "deployment_id",
            "gpu",
            "engine_version",
            (pl.col("measured_kv_pool_bytes") / GIB).round(2).alias("measured_gib"),
            (pl.col("predicted_kv_pool_bytes") / GIB).round(2).alias("predicted_gib"),
            "kv_pool_error",
            "loo_kv_pool_error",
            "calibrated",
            "saturation",
        )
        table = (
            gt_table(
                gt, shown, "Prediction vs measured", "KV pool per GPU; errors are (predicted - measured) / measured"
            )
            .fmt_percent(columns=["kv_pool_error", "loo_kv_pool_error"], decimals=2)
            .sub_missing(missing_text="")
        )
        out.append(
            details_block(
                "Prediction vs measured, every observed deployment",
                shown.height,
                table.as_raw_html(),
                COMPARISON_SQL,
                data.model,
            )
        )
    if not data.limits.is_empty():
        table = (
            gt_table(
                gt,
                data.limits,
                f"Effective context limits: {data.model}",
                "per GPU x TP at 8 and 32 concurrent sequences",
            )
            .fmt_integer(columns=["model_limit", "memory_limit", "calibrated_limit", "effective_limit"])
            .sub_missing(missing_text="")
        )
        out.append(
            details_block("Effective context limits", data.limits.height, table.as_raw_html(), LIMITS_SQL, data.model)
        )
    if not data.calibration.is_empty():
        table = gt_table(gt, data.calibration, "Calibration in use", "usable scopes (enough observations)").fmt_number(
            columns=["median", "mad", "ci_low", "ci_high"], n_sigfig=4
        )
        out.append(
            details_block(
                "Calibration in use", data.calibration.height, table.as_raw_html(), CALIBRATION_SQL, data.model
            )
        )
    if not data.feature_value.is_empty():
        out.append(feature_value_html(gt, data.feature_value, data.model))
    if not data.placements.is_empty():
        table = (
            gt_table(
                gt,
                data.placements,
                "Recommended placements, every column",
                "rank 1 per model x workload, the fleet plan's choice, and the infeasible",
            )
            .fmt_currency(columns=["usd_per_hour"], currency="USD")
            .fmt_currency(columns=["usd_per_sequence_hour"], currency="USD", decimals=4)
            .sub_missing(missing_text="")
        )
        out.append(
            details_block(
                "Recommended placements, every column",
                data.placements.height,
                table.as_raw_html(),
                PLACEMENTS_SQL,
                data.model,
            )
        )
    return out


def comparison_summary(data: ReportData) -> str:
    """Predicted vs measured in one paragraph: how many, the median error, the band, the worst."""
    frame = data.comparison
    if frame.is_empty():
        return "<p class='empty'>No observed deployment reported its KV pool: nothing to compare yet.</p>"
    worst = (
        frame.filter(pl.col("kv_pool_error").is_not_null())
        .sort(pl.col("kv_pool_error").abs(), descending=True)
        .head(WORST_SHOWN)
    )
    e = html.escape
    listed = ", ".join(
        f"{e(str(r['deployment_id']))} ({e(str(r['gpu']))}, {float(r['kv_pool_error']):+.1%})"
        for r in worst.iter_rows(named=True)
    )
    band = f"±{data.band:.1%}" if data.band is not None else "-"
    return (
        f"<p>capplan predicted the KV pool of <b>{frame.height}</b> observed deployments with a median error of "
        f"<b>{_pct(frame, 'kv_pool_error')}</b> ({_pct(frame, 'loo_kv_pool_error')} after calibration, "
        f"leave-one-out); {int(BAND_QUANTILE * 100)} % are within <b>{band}</b>. Largest errors: {listed}.</p>"
    )


STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2.4rem; border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
.meta { color: #666; } .sample { background: #fff4d6; border: 1px solid #e0b84c; padding: 0.6rem 1rem; }
.empty { color: #888; font-style: italic; } figure { margin: 1rem 0; } svg { max-width: 100%; height: auto; }
.stats { display: flex; gap: 2rem; flex-wrap: wrap; } .stats div { background: #f5f7fa; padding: 0.6rem 1rem; }
.stats b { display: block; font-size: 1.4rem; } .nofit { color: #555; }
details { margin: 0.8rem 0; border: 1px solid #ddd; padding: 0.4rem 0.8rem; }
summary { cursor: pointer; font-weight: 600; } .sql { font-family: ui-monospace, monospace; font-size: 0.8rem;
       color: #444; background: #f5f7fa; padding: 0.4rem; overflow-wrap: anywhere; }
"""


def render_report(data: ReportData) -> str:
    """The whole page, self-contained (inline SVG charts and inline-styled tables), answers first."""
    answers = answers_html(data)
    details = details_html(data)
    e = html.escape
    n = data.comparison.height
    stats = [
        ("GPUs it fits on", f"{data.fits.height} of {data.fits.height + len(data.no_fit)}"),
        ("observed deployments with a KV pool", f"{n}"),
        ("median |KV pool error|", _pct(data.comparison, "kv_pool_error")),
        ("median |error| after calibration (leave-one-out)", _pct(data.comparison, "loo_kv_pool_error")),
    ]
    if not data.procurement.is_empty():
        stats.append(("fleet plan", f"${float(data.procurement['fleet_usd_per_hour'][0]):,.2f}/h"))
    sample = (
        "<p class='sample'><b>SAMPLE telemetry.</b> The measurements below come from the SAMPLE fleet shipped with "
        "capplan (made-up numbers that show the flow). Set CAPPLAN_TELEMETRY_DIR to your drop folder.</p>"
        if data.telemetry_source and "sample" in data.telemetry_source
        else ""
    )
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>capplan report: {e(data.model)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>capplan report: {e(data.model)}</h1>",
        f"<p class='meta'>run {e(data.run_id or '-')} ({e(data.run_date or '-')}), generated "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}</p>",
        sample,
        "<div class='stats'>" + "".join(f"<div><b>{e(v)}</b>{e(k)}</div>" for k, v in stats) + "</div>",
        "<h2 id='fits'>Where it fits</h2>",
        answers.get("fits", "<p class='empty'>No capacity grid rows for this model (run capplan nightly).</p>"),
        "<h2 id='placements'>Recommended placements</h2>",
        answers.get("placements", "<p class='empty'>No workload profiles were planned.</p>"),
        answers.get("procurement", ""),
        "<h2 id='predicted-vs-measured'>Predicted vs measured</h2>",
        comparison_summary(data),
        f"<figure>{comparison_chart(data)}</figure>",
        "<h2 id='b-max'>B_max vs context</h2>",
        f"<figure>{curves_chart(data)}</figure>",
        "<h2 id='frontier'>Throughput vs latency</h2>",
        "<p>Per GPU at the replica above, vLLM with the checkpoint's weights: as the batch B grows from 1 to the "
        "memory limit B_max, each replica makes more tokens per second and each stream gets them more slowly "
        "(capacity.performance's roofline; a point per B). Pick the rightmost point within your TPOT target.</p>",
        f"<figure>{frontier_chart(data)}</figure>",
        "<h2 id='changes'>What changed since the previous run</h2>",
        diff_html(data.grid_diff),
        "<h2 id='details'>Details</h2>" if details else "",
        *details,
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _pct(frame: pl.DataFrame, column: str) -> str:
    if frame.is_empty() or column not in frame.columns:
        return "-"
    value = frame[column].drop_nulls().abs().median()
    return "-" if value is None else f"{float(value):.2%}"  # type: ignore[arg-type]
