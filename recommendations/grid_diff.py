"""What changed in the capacity grid, and why: night against night, or release against release.

Both answers are `marts.grid_diff` (`warehouse/marts/grid_diff.sql`), the one rule that pairs two
grids' rows and names each changed row's causes from its inputs' fingerprints (`raw.grid_inputs`):
- night against night reads the published warehouse, where the mart compares the last two runs;
- release against release computes the grid twice for the chosen models and GPUs, the engine at one
  release and then the other (`capacity.grid`), writes both as two runs (one partition each) into an
  in-memory DuckDB shaped like the warehouse's raw tables, and runs the same SQL there. Only the engine's release differs between
  the two, so any other cause there would be a bug of the comparison, not of the inputs.

`capplan diff` prints these rows; the HTML report shows the model's.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import duckdb
import polars as pl

from capacity.engine_constants import VLLM_SUPPORTED_VERSIONS, known_vllm_release, parse_version
from capacity.engines import Engine
from capacity.grid import GridOptions
from warehouse.capacity_grid import capacity_frames
from warehouse.grid_inputs import grid_input_rows
from warehouse.sql import read_sql

KEY_COLUMNS = ("model", "gpu", "engine", "weight_dtype", "kv_dtype", "tp", "pp", "dp", "ep", "context")
SHOWN_COLUMNS = (
    "change",
    "cause",
    *KEY_COLUMNS,
    "num_gpus",
    "engine_version_before",
    "engine_version_after",
    "b_max_before",
    "b_max_after",
    "max_concurrency_before",
    "max_concurrency_after",
    "kv_budget_bytes_per_gpu_before",
    "kv_budget_bytes_per_gpu_after",
    "kv_cache_tokens_before",
    "kv_cache_tokens_after",
    "fits_before",
    "fits_after",
    "tpot_ms_before",
    "tpot_ms_after",
    "usd_per_hour_before",
    "usd_per_hour_after",
    "price_source_before",
    "price_source_after",
    "change_pct",
)
# largest change first; a row that appeared or went counts as the largest change
ORDER = "order by case when change = 'changed' then 0 else 1 end desc, change_pct desc nulls last, " + ", ".join(
    KEY_COLUMNS
)
REPORT_ROWS = 15


class DiffUnavailable(Exception):
    """The diff cannot be read or computed (no warehouse mart, an engine without releases); one line."""


@dataclass(frozen=True, slots=True)
class GridDiff:
    """The changed rows (largest first, at most `limit`), how many there are by cause, and what was compared;
    its fields, in order, are the keys of `capplan diff --json`."""

    before: str | None
    after: str | None
    changed_rows: int
    by_cause: dict[str, int]
    rows: list[dict[str, Any]]

    def document(self) -> dict[str, Any]:
        """The one JSON object `capplan diff --json` prints."""
        return asdict(self)


def read_diff(
    con: duckdb.DuckDBPyConnection,
    *,
    models: Sequence[str] = (),
    gpus: Sequence[str] = (),
    limit: int | None = None,
    labels: tuple[str | None, str | None] | None = None,
) -> GridDiff:
    """marts.grid_diff's rows for these models and GPUs (all when empty), largest change first."""
    where = (
        "where (len($models) = 0 or list_contains($models, model)) and (len($gpus) = 0 or list_contains($gpus, gpu))"
    )
    params = {"models": list(models), "gpus": list(gpus)}
    try:
        counts = con.execute(
            f"select cause, count(*) from marts.grid_diff {where} group by cause order by 2 desc, 1", params
        ).fetchall()
        runs = con.execute("select run_id_before, run_id_after from marts.grid_diff_runs()").fetchone()
        cursor = con.execute(
            f"select {', '.join(SHOWN_COLUMNS)} from marts.grid_diff {where} {ORDER} limit $limit",
            params | {"limit": limit if limit is not None else 2**62},
        )
    except duckdb.CatalogException:
        raise DiffUnavailable(
            "this warehouse has no marts.grid_diff (published before capplan recorded grid inputs): "
            "run `capplan nightly` twice"
        ) from None
    names = [d[0] for d in cursor.description or ()]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    before, after = labels or ((str(runs[0]), str(runs[1])) if runs else (None, None))
    by_cause = {str(cause): int(n) for cause, n in counts}
    return GridDiff(before, after, sum(by_cause.values()), by_cause, rows)


def parse_release_range(text: str) -> tuple[Engine, str, str]:
    """`vllm:0.32.0..0.33.0` -> (Engine.VLLM, '0.32.0', '0.33.0'); DiffUnavailable on anything else."""
    engine_name, _, versions = text.partition(":")
    before, dots, after = versions.partition("..")
    if not engine_name or not dots or not before or not after:
        raise DiffUnavailable(f"--release {text!r}: expected ENGINE:OLD..NEW, e.g. vllm:0.32.0..0.33.0")
    try:
        engine = Engine(engine_name.strip().lower())
    except ValueError:
        raise DiffUnavailable(f"--release {text!r}: unknown engine {engine_name!r}") from None
    if engine is not Engine.VLLM:
        raise DiffUnavailable(
            f"--release: the grid plans {engine.value} at one release; only vllm has releases to compare"
        )
    unknown = [v for v in (before.strip(), after.strip()) if not known_vllm_release(v)]
    if unknown:
        known = ", ".join(VLLM_SUPPORTED_VERSIONS)
        raise DiffUnavailable(f"--release: no rules for vLLM {', '.join(unknown)} (known: {known})")
    return engine, before.strip(), after.strip()


def release_diff(
    models: pl.DataFrame,
    gpus: pl.DataFrame,
    release: tuple[Engine, str, str],
    *,
    limit: int | None = None,
) -> GridDiff:
    """The grid of `models` x `gpus` (raw.models / raw.gpus rows) at the engine's two releases, compared
    by marts.grid_diff's own SQL in an in-memory DuckDB laid out as the warehouse is."""
    engine, before, after = release
    con = duckdb.connect()
    try:
        con.execute("create schema raw; create schema marts")
        started = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        for n, version in enumerate((before, after)):
            run = pl.DataFrame({"run_id": [f"{engine.value} {version}"], "part_id": [n]})
            options = GridOptions(engines=(engine.value,), vllm_version=version)
            frames = capacity_frames(models, gpus, options)
            inputs = grid_input_rows(models, gpus, options).with_columns(
                run_id=pl.lit(run["run_id"][0]), run_started_at=pl.lit(started + dt.timedelta(days=n))
            )
            _append(con, "raw.grid_partitions", run)
            _append(con, "raw.deployments", frames.deployments.with_columns(part_id=pl.lit(n)))
            _append(con, "raw.capacity_grid", frames.grid.with_columns(part_id=pl.lit(n)))
            _append(con, "raw.grid_inputs", inputs)
        con.execute(read_sql("marts", "grid_diff"))
        return read_diff(con, limit=limit, labels=(f"{engine.value} {before}", f"{engine.value} {after}"))
    finally:
        con.close()


def _append(con: duckdb.DuckDBPyConnection, table: str, frame: pl.DataFrame) -> None:
    con.register("incoming", frame)
    exists = con.execute(
        "select count(*) from duckdb_tables() where schema_name || '.' || table_name = $t", {"t": table}
    ).fetchone()
    if exists and exists[0]:
        con.execute(f"insert into {table} by name select * from incoming")
    else:
        con.execute(f"create table {table} as select * from incoming")
    con.unregister("incoming")


def _change_line(row: dict[str, Any]) -> str:
    layout = f"{row['model']} on {row['num_gpus']} x {row['gpu']} ({row['engine']} TP {row['tp']} x PP {row['pp']}, "
    if (row.get("dp") or 1) > 1 or (row.get("ep") or 1) > 1:
        layout += f"DP {row['dp']} x EP {row['ep']}, "
    layout += f"{row['weight_dtype']}/{row['kv_dtype']}) at {row['context']:,} tokens"
    if row["change"] != "changed":
        return f"{row['change']}: {layout}"
    moved = []
    for name, label in (("b_max", "B_max"), ("kv_budget_bytes_per_gpu", "KV budget B"), ("usd_per_hour", "$/h")):
        old, new = row[f"{name}_before"], row[f"{name}_after"]
        if old != new:
            moved.append(f"{label} {_num(old)} -> {_num(new)}")
    if row["tpot_ms_before"] != row["tpot_ms_after"]:
        moved.append(f"TPOT ms {_num(row['tpot_ms_before'])} -> {_num(row['tpot_ms_after'])}")
    if row["engine_version_before"] != row["engine_version_after"]:
        moved.append(f"release {row['engine_version_before']} -> {row['engine_version_after']}")
    pct = row.get("change_pct")
    return f"{layout}: {'; '.join(moved)}" + (f" ({pct:+.1f} %)" if pct is not None else "")


def _num(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def text_lines(diff: GridDiff) -> list[str]:
    """The diff for a terminal: a header, then the rows grouped by cause, largest change first."""
    if diff.before is None:
        return ["no diff yet: the warehouse holds one run with recorded grid inputs (run `capplan nightly` again)"]
    lines = [f"grid diff: {diff.before} -> {diff.after}: {diff.changed_rows:,} changed rows"]
    if not diff.changed_rows:
        return [*lines, "nothing changed"]
    lines += [f"  {cause}: {n:,} rows" for cause, n in diff.by_cause.items()]
    for cause in diff.by_cause:
        shown = [r for r in diff.rows if r["cause"] == cause]
        if shown:
            lines.append(f"\n{cause} ({diff.by_cause[cause]:,} rows; largest changes first)")
            lines += [f"  {_change_line(r)}" for r in shown]
    if len(diff.rows) < diff.changed_rows:
        lines.append(f"\n({diff.changed_rows - len(diff.rows):,} more rows: --limit 0 shows them all)")
    return lines


def diff_html(diff: GridDiff | None) -> str:
    """The report's section: what changed for this model since the previous run, and why."""
    if diff is None or diff.before is None:
        return "<p class='empty'>No earlier run with recorded grid inputs to compare with yet.</p>"
    e = html.escape
    if not diff.changed_rows:
        return (
            f"<p>Nothing in this model's grid changed between run {e(str(diff.before))} and {e(str(diff.after))}.</p>"
        )
    causes = ", ".join(f"<b>{e(c)}</b> {n:,} rows" for c, n in diff.by_cause.items())
    items = "".join(f"<li>[{e(str(r['cause']))}] {e(_change_line(r))}</li>" for r in diff.rows)
    return (
        f"<p>Between run {e(str(diff.before))} and {e(str(diff.after))}, {diff.changed_rows:,} rows of this model's grid changed: "
        f"{causes} (marts.grid_diff; the largest changes first).</p><ul>{items}</ul>"
    )


RELEASE_DIFF_SCHEMA = {
    "fleet_release": pl.String,
    "next_release": pl.String,
    **{name: pl.String for name in ("change", "cause", "model", "gpu", "engine", "weight_dtype", "kv_dtype")},
    **{name: pl.Int64 for name in ("tp", "pp", "dp", "ep", "context", "num_gpus")},
    "engine_version_before": pl.String,
    "engine_version_after": pl.String,
    "b_max_before": pl.Int64,
    "b_max_after": pl.Int64,
    "max_concurrency_before": pl.Float64,
    "max_concurrency_after": pl.Float64,
    "kv_budget_bytes_per_gpu_before": pl.Int64,
    "kv_budget_bytes_per_gpu_after": pl.Int64,
    "kv_cache_tokens_before": pl.Int64,
    "kv_cache_tokens_after": pl.Int64,
    "fits_before": pl.Boolean,
    "fits_after": pl.Boolean,
    "tpot_ms_before": pl.Float64,
    "tpot_ms_after": pl.Float64,
    "usd_per_hour_before": pl.Float64,
    "usd_per_hour_after": pl.Float64,
    "price_source_before": pl.String,
    "price_source_after": pl.String,
    "change_pct": pl.Float64,
}


def fleet_release_diffs(models: pl.DataFrame, gpus: pl.DataFrame, deployments: pl.DataFrame) -> pl.DataFrame:
    """For each vLLM release the fleet runs (raw.telemetry_deployments) older than the newest capplan knows:
    the grid of the models x GPUs that run it, at that release against the newest (what an upgrade changes).
    Bounded by the fleet: the models and GPUs of its deployments only, vLLM only, one minor release at a time."""
    newest = VLLM_SUPPORTED_VERSIONS[-1]
    vllm = deployments.filter((pl.col("engine") == Engine.VLLM.value) & pl.col("engine_version").is_not_null()).select(
        "engine_version", "model_id", "gpu_sku"
    )
    by_release: dict[str, set[tuple[str, str]]] = {}
    for version, model, gpu in vllm.iter_rows():
        if known_vllm_release(str(version)):
            minor = ".".join(str(part) for part in parse_version(str(version))[:2])
            if parse_version(minor) < parse_version(newest):
                by_release.setdefault(minor, set()).add((str(model), str(gpu)))
    frames = []
    for release, pairs in sorted(by_release.items(), key=lambda item: parse_version(item[0])):
        wanted_models = {model for model, _ in pairs} & set(models["repo_id"].to_list())
        wanted_gpus = {gpu for _, gpu in pairs} & set(gpus["slug"].to_list())
        if not wanted_models or not wanted_gpus:
            continue
        diff = release_diff(
            models.filter(pl.col("repo_id").is_in(sorted(wanted_models))),
            gpus.filter(pl.col("slug").is_in(sorted(wanted_gpus))),
            (Engine.VLLM, release, newest),
        )
        rows = [row for row in diff.rows if (row["model"], row["gpu"]) in pairs]
        if rows:
            frame = pl.DataFrame(rows, schema={k: v for k, v in RELEASE_DIFF_SCHEMA.items() if k in rows[0]})
            frames.append(frame.with_columns(fleet_release=pl.lit(release), next_release=pl.lit(newest)))
    if not frames:
        return pl.DataFrame(schema=RELEASE_DIFF_SCHEMA)
    return pl.concat(frames, how="diagonal").select(list(RELEASE_DIFF_SCHEMA))
