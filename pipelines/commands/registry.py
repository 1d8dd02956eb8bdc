"""`capplan registry ...` (being written: registry task)."""

import typer

app = typer.Typer(help="Model and GPU registry: ingest, list, show.", no_args_is_help=True)
