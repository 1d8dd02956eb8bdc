"""`capplan report`: one self-contained HTML page over the published warehouse.

`read_report(con, model)` reads what the page shows from the marts (a read-only connection);
`render_report(data)` turns it into HTML: Vega-Lite charts built with altair and rendered to inline
SVG by vl-convert (no script, no network), tables built with great-tables (inline styles). The
extra `report` (altair, great-tables, vl-convert-python) provides them; `ReportUnavailable` says
so when it is missing.

Sections: B_max against context per GPU for one model (marts.capacity_grid; GPUs whose curves are
identical share a line), capplan's predicted KV pool against the engine's measured one for every
observed deployment with the error band (marts.prediction_vs_measured), the recommended placements
and the procurement plan, and the calibration in use.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import math
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

GIB = 1 << 30
MAX_CURVES = 14
BAND_QUANTILE = 0.9


class ReportUnavailable(RuntimeError):
    """The report cannot be built (missing extra, missing marts, unknown model): one line."""


@dataclass(frozen=True)
class ReportData:
    run_id: str | None
    run_date: str | None
    model: str
    telemetry_source: str | None
    curves: pl.DataFrame  # label, gpu, tp, pp, weight_dtype, context, b_max
    comparison: pl.DataFrame  # prediction_vs_measured rows with both KV pools
    band: float | None  # |kv_pool_error| quantile BAND_QUANTILE
    band_calibrated: float | None
    placements: pl.DataFrame
    procurement: pl.DataFrame
    calibration: pl.DataFrame
    limits: pl.DataFrame  # effective context limits of the model, per GPU x TP at concurrency 8 and 32


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


def curves_frame(grid: pl.DataFrame) -> pl.DataFrame:
    """Per GPU, the smallest replica (TP x PP) at which the model fits at its smallest context; GPUs
    with the same curve share one line (label 'gpu (+n)')."""
    if grid.is_empty():
        return pl.DataFrame(schema={"label": pl.String, "gpu": pl.String, "tp": pl.Int64, "pp": pl.Int64,
                                    "context": pl.Int64, "b_max": pl.Int64})  # fmt: skip
    native = "auto" if (grid["weight_dtype"] == "auto").any() else "bf16"
    rows = grid.filter(pl.col("weight_dtype") == native)
    smallest = rows["context"].min()
    fitting = (
        rows.filter((pl.col("context") == smallest) & pl.col("fits"))
        .sort("gpu", pl.col("tp") * pl.col("pp"), "tp")
        .group_by("gpu", maintain_order=True)
        .first()
        .select("gpu", "tp", "pp")
    )
    chosen = rows.join(fitting, on=["gpu", "tp", "pp"], how="inner").filter(pl.col("b_max") > 0)
    groups: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], list[str]] = {}
    peak: dict[str, int] = {}
    for gpu, part in chosen.sort("gpu", "context").group_by("gpu", maintain_order=True):
        b_max = tuple(int(b) for b in part["b_max"])
        signature = (int(part["tp"][0]), int(part["pp"][0]), tuple(int(c) for c in part["context"]), b_max)
        groups.setdefault(signature, []).append(str(gpu[0]))
        peak[str(gpu[0])] = max(b_max)
    labels: dict[str, str] = {}
    for (tp, pp, _ctx, _b), gpus in groups.items():
        replica = f"TP{tp}" + (f" PP{pp}" if pp > 1 else "")
        more = f" +{len(gpus) - 1}" if len(gpus) > 1 else ""
        labels[gpus[0]] = f"{gpus[0]}{more} ({replica})"
    # at most MAX_CURVES lines, spread from the smallest to the largest capacity
    ordered = sorted(labels, key=lambda g: (peak[g], g))
    if len(ordered) > MAX_CURVES:
        ordered = [ordered[round(i * (len(ordered) - 1) / (MAX_CURVES - 1))] for i in range(MAX_CURVES)]
    keep = ordered
    return (
        chosen.filter(pl.col("gpu").is_in(keep))
        .with_columns(pl.col("gpu").replace_strict(labels, default=None).alias("label"))
        .select("label", "gpu", pl.col("tp").cast(pl.Int64), pl.col("pp").cast(pl.Int64), "context", "b_max")
        .sort("label", "context")
    )


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
    run = con.execute("select run_id, run_date from marts.runs order by started_at desc limit 1").fetchone() if _exists(
        con, "runs"
    ) else None  # fmt: skip
    grid = _frame(
        con,
        "capacity_grid",
        "select gpu, tp, pp, weight_dtype, context, b_max, fits from marts.capacity_grid "
        "where model = $m and engine = 'vllm' and kv_dtype = 'auto' and weight_dtype in ('auto', 'bf16')",
        {"m": chosen},
    )
    comparison = _frame(
        con,
        "prediction_vs_measured",
        "select deployment_id, telemetry_source, model, gpu, engine_version, tp, pp, measured_kv_pool_bytes, "
        "predicted_kv_pool_bytes, kv_pool_error, loo_kv_pool_bytes, loo_kv_pool_error, measured_kv_cache_tokens, "
        "predicted_kv_cache_tokens, kv_cache_tokens_error, calibrated, calibration_scope, saturation "
        "from marts.prediction_vs_measured where measured_kv_pool_bytes is not null "
        "and predicted_kv_pool_bytes is not null order by deployment_id",
    )
    band = _quantile(comparison, "kv_pool_error")
    band_calibrated = _quantile(comparison, "loo_kv_pool_error")
    placements = _frame(
        con,
        "recommended_placements",
        "select workload, model, rank, feasible, gpu, tp, pp, weight_dtype, kv_dtype, b_max, planned_per_replica, "
        "replicas, gpus_total, usd_per_hour, usd_per_sequence_hour, calibrated, in_fleet_plan, reason "
        "from marts.recommended_placements where rank = 1 or in_fleet_plan or not feasible "
        "order by workload, model, rank nulls last",
    )
    procurement = _frame(
        con,
        "procurement_plan",
        "select gpu, gpu_name, nodes, gpus_used, gpus_bought, spare_gpus, usd_per_gpu_hour, usd_per_hour, "
        "array_to_string(workloads, ', ') as workloads, fleet_usd_per_hour, method, optimal "
        "from marts.procurement_plan order by usd_per_hour desc, gpu",
    )
    calibration = _frame(
        con,
        "calibration",
        "select scope, term, n_observations, median, mad, ci_low, ci_high from marts.calibration "
        "where usable and term in ('activation_peak', 'non_torch', 'kv_pool', 'kv_pool_calibrated') "
        "order by scope, term",
    )
    limits = _frame(
        con,
        "effective_context_limits",
        "select gpu, tp, pp, concurrency, model_limit, memory_limit, calibrated_limit, effective_limit, binding "
        "from marts.effective_context_limits where kind = 'model_gpu_tp' and model = $m and concurrency in (8, 32) "
        "and effective_limit > 0 order by gpu, tp, pp, concurrency",
        {"m": chosen},
    )
    sources = comparison["telemetry_source"].unique().to_list() if comparison.height else []
    return ReportData(
        run_id=str(run[0]) if run else None,
        run_date=run[1].isoformat() if run and isinstance(run[1], dt.date) else None,
        model=chosen,
        telemetry_source=",".join(sorted(str(s) for s in sources if s)) or None,
        curves=curves_frame(grid),
        comparison=comparison,
        band=band,
        band_calibrated=band_calibrated,
        placements=placements,
        procurement=procurement,
        calibration=calibration,
        limits=limits,
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
            f"the report needs the extra 'report' ({exc.name} is missing): pip install 'capplan[report]'"
        ) from None
    return alt, gt


def _svg(chart: Any) -> str:
    buffer = io.StringIO()
    chart.save(buffer, format="svg")
    return buffer.getvalue()


def curves_chart(data: ReportData) -> str:
    alt, _gt = _modules()
    if data.curves.is_empty():
        return "<p class='empty'>No capacity grid rows for this model (run <code>capplan nightly</code>).</p>"
    chart = (
        alt.Chart(data.curves)
        .mark_line(point=True)
        .encode(
            x=alt.X("context:Q", title="context (tokens per sequence)", scale=alt.Scale(type="log", base=2)),
            y=alt.Y("b_max:Q", title="B_max (concurrent sequences)", scale=alt.Scale(type="log")),
            color=alt.Color("label:N", title="GPU (smallest replica that fits)"),
            tooltip=["label", "gpu", "tp", "pp", "context", "b_max"],
        )
        .properties(width=640, height=360, title=f"B_max vs context: {data.model} (vLLM, checkpoint weights, KV auto)")
    )
    return _svg(chart)


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


def _table(gt: Any, frame: pl.DataFrame, title: str, subtitle: str = "") -> Any:
    return gt.GT(frame).tab_header(title=title, subtitle=subtitle or None).opt_row_striping()


def tables_html(data: ReportData) -> dict[str, str]:
    _alt, gt = _modules()
    out: dict[str, str] = {}
    if not data.placements.is_empty():
        table = (
            _table(
                gt,
                data.placements,
                "Recommended placements",
                "rank 1 per model x workload, and the fleet plan's choice",
            )
            .fmt_currency(columns=["usd_per_hour"], currency="USD")
            .fmt_currency(columns=["usd_per_sequence_hour"], currency="USD", decimals=4)
            .sub_missing(missing_text="")
        )
        out["placements"] = table.as_raw_html()
    if not data.procurement.is_empty():
        first = data.procurement.row(0, named=True)
        subtitle = (
            f"fleet: {int(data.procurement['gpus_bought'].sum())} GPUs, ${first['fleet_usd_per_hour']:,.2f}/hour "
            f"({first['method']}, {'optimal' if first['optimal'] else 'not proven optimal'})"
        )
        table = (
            _table(gt, data.procurement.drop("fleet_usd_per_hour", "method", "optimal"), "Procurement plan", subtitle)
            .fmt_currency(columns=["usd_per_gpu_hour", "usd_per_hour"], currency="USD")
            .sub_missing(missing_text="")
        )
        out["procurement"] = table.as_raw_html()
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
            _table(gt, shown, "Prediction vs measured", "KV pool per GPU; errors are (predicted - measured) / measured")
            .fmt_percent(columns=["kv_pool_error", "loo_kv_pool_error"], decimals=2)
            .sub_missing(missing_text="")
        )
        out["comparison"] = table.as_raw_html()
    if not data.calibration.is_empty():
        out["calibration"] = _table(gt, data.calibration, "Calibration in use", "usable scopes (enough observations)")\
            .fmt_number(columns=["median", "mad", "ci_low", "ci_high"], n_sigfig=4).as_raw_html()  # fmt: skip
    if not data.limits.is_empty():
        out["limits"] = _table(
            gt, data.limits, f"Effective context limits: {data.model}", "per GPU x TP at 8 and 32 concurrent sequences"
        ).fmt_integer(columns=["model_limit", "memory_limit", "calibrated_limit", "effective_limit"]).sub_missing(
            missing_text=""
        ).as_raw_html()  # fmt: skip
    return out


STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2rem auto; max-width: 1100px;
       color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 2.4rem; border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
.meta { color: #666; } .sample { background: #fff4d6; border: 1px solid #e0b84c; padding: 0.6rem 1rem; }
.empty { color: #888; font-style: italic; } figure { margin: 1rem 0; } svg { max-width: 100%; height: auto; }
.stats { display: flex; gap: 2rem; flex-wrap: wrap; } .stats div { background: #f5f7fa; padding: 0.6rem 1rem; }
.stats b { display: block; font-size: 1.4rem; }
"""


def render_report(data: ReportData) -> str:
    """The whole page, self-contained (inline SVG charts and inline-styled tables)."""
    tables = tables_html(data)
    e = html.escape
    n = data.comparison.height
    stats = [
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
        "<h2 id='b-max'>B_max vs context per GPU</h2>",
        f"<figure>{curves_chart(data)}</figure>",
        tables.get("limits", ""),
        "<h2 id='predicted-vs-measured'>Predicted vs measured</h2>",
        f"<figure>{comparison_chart(data)}</figure>",
        tables.get("comparison", ""),
        tables.get("calibration", ""),
        "<h2 id='placements'>Recommended placements</h2>",
        tables.get("placements", "<p class='empty'>No workload profiles were planned.</p>"),
        "<h2 id='procurement'>Procurement plan</h2>",
        tables.get("procurement", "<p class='empty'>No procurement plan.</p>"),
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _pct(frame: pl.DataFrame, column: str) -> str:
    if frame.is_empty() or column not in frame.columns:
        return "-"
    value = frame[column].drop_nulls().abs().median()
    return "-" if value is None else f"{float(value):.2%}"  # type: ignore[arg-type]
