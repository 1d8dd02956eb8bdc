"""`capplan export`: the published answers in formats other systems read.

`capplan export admission [--format json|csv] [--out PATH]`: marts.admission_budgets for routers —
per deployment the longest request, the KV tokens in flight and the concurrent requests to admit.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from pipelines.commands.common import WarehouseOption, WholeHelpGroup, fail, fail_on_query_error, open_warehouse
from pipelines.commands.sql import _json_value

FORMATS = ("json", "csv")

app = typer.Typer(
    cls=WholeHelpGroup,
    help="Export published answers (admission budgets for routers).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("admission")
def admission(
    fmt: Annotated[
        str, typer.Option("--format", metavar="json|csv", help="json (one object with a deployments list) or csv.")
    ] = "json",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", metavar="FILE", help="File to write (default: stdout).")
    ] = None,
    warehouse: WarehouseOption = None,
) -> None:
    """Admission budgets per deployment: max request tokens, token budget, sequence budget."""
    import duckdb

    from recommendations.admission import EXPORT_FIELDS, admission_document

    if fmt not in FORMATS:
        fail(f"unknown --format {fmt!r}; expected one of {', '.join(FORMATS)}")
    con = open_warehouse(warehouse)
    try:
        document = admission_document(con)
    except duckdb.Error as exc:
        fail_on_query_error(exc, "no admission budgets in this warehouse (run `capplan nightly`)")
    finally:
        con.close()
    if fmt == "json":
        text = json.dumps(_json_value(document), indent=2) + "\n"
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(EXPORT_FIELDS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(document["deployments"])
        text = buffer.getvalue()
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    typer.echo(f"wrote {out}: {len(document['deployments'])} deployments, run {document['run_id']}", err=True)
