"""`capplan report`: one self-contained HTML page over the published warehouse.

Answers first (where the model fits and at what cost, the recommended placements and the procurement
plan, predicted vs measured), then the charts, then the long tables folded with their SQL
(`recommendations.html_report`; extra `report`). Reads the warehouse read-only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.commands.common import WarehouseOption, fail, fail_on_query_error, open_warehouse

DEFAULT_OUT = Path("var/capplan-report.html")


def report(
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            metavar="MODEL",
            help="Registry id to chart (default: the model most observed deployments serve).",
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="HTML file to write.")] = DEFAULT_OUT,
    warehouse: WarehouseOption = None,
) -> None:
    """Write the HTML report: B_max curves, predicted vs measured, placements, procurement."""
    import duckdb

    from recommendations.html_report import ReportUnavailable, read_report, render_report

    con = open_warehouse(warehouse)
    try:
        data = read_report(con, model)
        page = render_report(data)
    except ReportUnavailable as exc:
        fail(str(exc))
    except duckdb.Error as exc:
        fail_on_query_error(exc, "the warehouse cannot answer the report's queries")
    finally:
        con.close()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    typer.echo(f"wrote {out} ({len(page.encode()) / 1024:,.0f} KiB): {data.model}, run {data.run_id}")
