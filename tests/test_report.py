"""`capplan report` and `capplan export admission` on a warehouse the real definitions built.

Every asset of the definitions is materialized once, in-process, on a two-model catalog with the
drop folder of test_telemetry_pipeline (a real vLLM 0.19 CodeLlama-7b H100 startup log, malformed
metrics); the report is rendered through the CLI and checked for its content, and for being one
self-contained file.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from tests.conftest import require_extra
from tests.test_telemetry_pipeline import Env


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Env:
    from pipelines.definitions import build_definitions

    defs = build_definitions()

    env = Env(tmp_path_factory.mktemp("report"))
    result = dg.materialize(
        [*(defs.assets or []), *(defs.asset_checks or [])],  # type: ignore[list-item]
        resources=env.resources(),
        raise_on_error=False,
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return env


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture(scope="module")
def report_extra() -> None:
    require_extra("report", "altair", "great_tables", "vl_convert")


@pytest.fixture(scope="module")
def page(built: Env, runner: CliRunner, tmp_path_factory: pytest.TempPathFactory, report_extra: None) -> str:
    out = tmp_path_factory.mktemp("out") / "report.html"
    result = runner.invoke(app, ["report", "--warehouse", str(built.warehouse), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output and "codellama/CodeLlama-7b-hf" in result.output
    return out.read_text(encoding="utf-8")


def test_the_report_is_one_self_contained_page(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page, "no JavaScript: charts are inline SVG"
    assert not re.findall(r"(?:src|href)=['\"]?https?://", page), "nothing fetched from the network"
    assert page.count("<svg") >= 2


def test_the_report_shows_curves_the_comparison_and_the_plans(page: str) -> None:
    # the model charted by default: the one the observed deployments serve
    assert "capplan report: codellama/CodeLlama-7b-hf" in page
    # B_max vs context per GPU: axis titles and one line per GPU of the catalog
    assert "context (tokens per sequence)" in page and "B_max (concurrent sequences)" in page
    assert "h100-sxm-80gb" in page and "l4-24gb" in page
    # predicted vs measured: the pasted deployment, both numbers, the band
    assert "Predicted vs measured KV pool, 1 deployments; band:" in page
    assert "codellama-h100" in page and "measured KV pool per GPU (GiB)" in page
    assert re.search(r">\s*61\.66\s*<", page), "the measured 61.66 GiB of the log is in the table"
    # placements and procurement tables
    assert "Recommended placements" in page and "Procurement plan" in page
    for workload in ("chat", "code"):
        assert f">{workload}<" in page
    assert "$" in page and ("highs" in page or "enumeration" in page)


def test_the_page_leads_with_the_answers_and_folds_the_long_tables(page: str) -> None:
    order = [page.index(h) for h in ("id='fits'", "id='placements'", "id='predicted-vs-measured'", "id='b-max'")]
    assert order == sorted(order), "where it fits, placements, predicted vs measured, then the curves"
    assert "cheapest per sequence first" in page and "$ per sequence-hour at 8k tokens" in page
    assert re.search(r"(h100-sxm-80gb|l4-24gb)[^<]* TP\d", page), "curves and rows say their layout"
    details = re.findall(r"<details>.*?</details>", page, flags=re.DOTALL)
    assert details and all("capplan sql" in d for d in details), "every folded table shows the SQL behind it"
    assert any("marts.prediction_vs_measured" in d for d in details)


def test_table_headers_are_words_not_column_names(page: str) -> None:
    headers = [h.strip() for h in re.findall(r"<th[^>]*>([^<]*)</th>", page) if h.strip()]
    assert headers, "the tables have headers"
    raw = [h for h in headers if re.fullmatch(r"[a-z0-9_,]+", h) and "_" in h]
    assert not raw, f"raw column names as headers: {raw}"
    assert "$ per hour" in headers and "GPUs per replica" in headers


def _grid(gpus: dict[str, tuple[int, list[int]]]) -> pl.DataFrame:
    """A capacity-grid slice: per GPU (tp, B_max per context 1k, 2k, 4k), bf16, fits where B_max >= 1."""
    rows = [
        {"gpu": gpu, "tp": tp, "pp": 1, "num_gpus": tp, "weight_dtype": "bf16", "context": 1024 << i, "b_max": b,
         "fits": b >= 1, "usd_per_hour": float(tp)}
        for gpu, (tp, b_max) in gpus.items()
        for i, b in enumerate(b_max)
    ]  # fmt: skip
    return pl.DataFrame(rows)


def test_curves_name_every_merged_gpu_and_say_their_layout() -> None:
    from recommendations.html_report import curves_frame, fits_frame

    same = [40, 20, 10]
    curves = curves_frame(
        _grid({"a100": (1, same), "h100": (1, same), "b200": (1, [90, 45, 22]), "t4": (4, [3, 1, 0])})
    )
    assert set(curves["label"]) == {"a100 = h100 TP1", "b200 TP1", "t4 TP4"}
    many = curves_frame(_grid({f"gpu{i:02d}": (1, [i + 1, i + 1, i + 1]) for i in range(30)}))
    assert many["label"].n_unique() == 30, "every GPU has its line (charts of at most 20 are drawn from them)"
    fits = fits_frame(_grid({"cheap": (1, [40, 20, 10]), "dear": (2, [40, 20, 10]), "none": (1, [0, 0, 0])}))
    assert fits["gpu"].to_list() == ["cheap", "dear"] and fits["layout"].to_list() == ["TP1", "TP2"]


def test_report_for_another_model_and_errors(built: Env, runner: CliRunner, tmp_path: Path, report_extra: None) -> None:
    out = tmp_path / "llama.html"
    ok = runner.invoke(
        app,
        ["report", "--warehouse", str(built.warehouse), "--model", "meta-llama/Llama-3.1-8B-Instruct", "-o", str(out)],
    )
    assert ok.exit_code == 0, ok.output
    assert "capplan report: meta-llama/Llama-3.1-8B-Instruct" in out.read_text(encoding="utf-8")
    unknown = runner.invoke(app, ["report", "--warehouse", str(built.warehouse), "--model", "acme/nope"])
    assert unknown.exit_code == 2 and "not in marts.models" in unknown.output
    missing = runner.invoke(app, ["report", "--warehouse", str(tmp_path / "none.duckdb")])
    assert missing.exit_code == 2 and "capplan nightly" in missing.output


def test_without_the_report_extra_the_error_says_what_to_install(built: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    from recommendations.html_report import ReportUnavailable, read_report, render_report

    con = duckdb.connect(str(built.warehouse), read_only=True)
    try:
        data = read_report(con)
    finally:
        con.close()
    monkeypatch.setitem(sys.modules, "altair", None)
    with pytest.raises(ReportUnavailable, match=re.escape("pip install -e '.[report]'")):
        render_report(data)


def test_export_admission_for_routers(built: Env, runner: CliRunner) -> None:
    result = runner.invoke(app, ["export", "admission", "--format", "json", "--warehouse", str(built.warehouse)])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["run_id"]
    by_id = {d["deployment_id"]: d for d in document["deployments"]}
    code = by_id["codellama-h100"]
    assert code["model"] == "codellama/CodeLlama-7b-hf" and code["gpu"] == "h100-sxm-80gb"
    assert code["capacity_source"] == "measured" and code["token_budget"] == int(code["kv_capacity_tokens"] * 0.9)
    assert code["max_request_tokens"] == 8192 and 1 <= code["sequence_budget_at_max_len"] <= code["sequence_budget"]
    rows = list(csv.DictReader(io.StringIO(
        runner.invoke(app, ["export", "admission", "--format", "csv", "--warehouse", str(built.warehouse)]).stdout
    )))  # fmt: skip
    assert [r["deployment_id"] for r in rows] == sorted(by_id)
    bad = runner.invoke(app, ["export", "admission", "--format", "xml", "--warehouse", str(built.warehouse)])
    assert bad.exit_code == 2 and "unknown --format" in bad.output


def test_the_frontier_is_the_performance_model_at_each_batch(page: str, built: Env) -> None:
    """Chart data = capacity.performance at B = 1, 2, 4 ... B_max; the page carries the chart."""
    import duckdb

    from capacity.performance import performance
    from capacity.spec import DeploymentSpec
    from models_registry.planning import bundled_catalog
    from recommendations.html_report import (
        FRONTIER_INPUT_TOKENS,
        FRONTIER_OUTPUT_TOKENS,
        frontier_batches,
        read_report,
    )
    from tests.estimating import estimate_model

    assert frontier_batches(1) == [1] and frontier_batches(8) == [1, 2, 4, 8] and frontier_batches(11) == [1, 2, 4, 8, 11]
    assert frontier_batches(0) == []
    con = duckdb.connect(str(built.warehouse), read_only=True)
    try:
        data = read_report(con, "codellama/CodeLlama-7b-hf")
    finally:
        con.close()
    h100 = data.frontier.filter(pl.col("gpu") == "h100-sxm-80gb").sort("batch")
    assert h100.height >= 5 and h100["label"][0] == "h100-sxm-80gb TP1"
    registry = bundled_catalog(["codellama/CodeLlama-7b-hf"], ["h100-sxm-80gb"])
    model, gpu = registry.models["codellama/CodeLlama-7b-hf"], registry.gpus["h100-sxm-80gb"]
    context = FRONTIER_INPUT_TOKENS + FRONTIER_OUTPUT_TOKENS
    est = estimate_model(model, DeploymentSpec(tp=1, pp=1, max_model_len=context), gpu=gpu, context_tokens=context)
    assert h100["batch"].to_list() == frontier_batches(est.b_max)
    for row in h100.iter_rows(named=True):
        perf = performance(
            model.spec, est, gpu, concurrency=row["batch"], input_tokens=FRONTIER_INPUT_TOKENS,
            output_tokens=FRONTIER_OUTPUT_TOKENS, chunk_tokens=est.pool.max_num_batched_tokens or context,
        )  # fmt: skip
        assert (row["tpot_ms"], row["output_tokens_per_second"], row["ttft_ms"]) == (
            perf.tpot_ms, perf.output_tokens_per_second, perf.ttft_ms
        )  # fmt: skip
    # more sequences: more tokens per replica, each stream slower
    assert h100["output_tokens_per_second"].is_sorted() and h100["tpot_ms"].is_sorted()
    assert "id='frontier'" in page and "Throughput vs latency: codellama/CodeLlama-7b-hf" in page
    assert "output tokens/s per replica" in page and "TPOT (ms per output token)" in page
    assert page.count("<svg") >= 3
