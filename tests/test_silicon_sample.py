"""The second blind speed set (evaluation/silicon_sample.py): NVIDIA's measured aggregated-serving runs shipped in
aiconfigurator-core 0.12.0, read as serving rows at a fixed concurrency. Checked by hand on single runs of the file,
then the whole set through the holdout's scorer, whose figures the README quotes."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from evaluation.perf_cv import holdout_report
from evaluation.perf_measurements import PerfMeasurement, load_perf_measurements
from evaluation.silicon_sample import SILICON_PATH, SiliconSkip, _row, overlaps, read_silicon


def _raw(run: str) -> dict[str, str]:
    with SILICON_PATH.open(newline="", encoding="utf-8") as handle:
        return next(r for r in csv.DictReader(handle) if r["id"] == run)


def test_a_run_becomes_the_serving_row_it_measured() -> None:
    # the file's line: vllm,(no release),meta-llama/Llama-3.1-70B,h200_sxm,fp8,fp8,fp8,1024,8192,8,4,1,1,4,1,111.28...,10.306...
    raw = _raw("2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c8_tp4_ep1_419")
    row = _row(raw)
    assert isinstance(row, PerfMeasurement)
    assert (row.engine, row.gpu, row.tp, row.pp, row.num_gpus) == ("vllm", "h200-sxm-141gb", 4, 1, 4)
    assert row.config_model == "meta-llama/Llama-3.1-70B-Instruct" and not row.model_in_catalog
    assert row.weight_dtype == "fp8" and row.kv_cache_dtype is None  # the KV dtype is not stated: the default
    assert (row.input_len, row.output_len, row.effective_concurrency) == (1024, 8192, 8)
    assert row.engine_version is None and row.request_rate is None and row.benchmark_kind == "serving"  # a closed loop at the concurrency
    assert row.mean_ttft_ms == pytest.approx(111.28028162638657)
    assert row.mean_tpot_ms == pytest.approx(10.306287738122089)


def test_runs_capplan_cannot_take_as_stated_are_skipped_with_the_reason() -> None:
    # DeepSeek-V3 at NVFP4 on 16 GPUs with expert parallel 4: both the layout and the checkpoint are out
    skipped = _row(_raw("dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg202"))
    assert isinstance(skipped, SiliconSkip) and "expert parallel 4" in skipped.reason
    raw = {**_raw("dsr1_b200_sglang_fp4_agg_1024x1024_c4_cfg202"), "attention_dp_size": "1", "moe_ep_size": "1"}
    skipped = _row(raw)
    assert isinstance(skipped, SiliconSkip) and "fp4 copy of a fp8 checkpoint" in skipped.reason
    skipped = _row({**raw, "model_path": "zhipuai/GLM-5"})
    assert isinstance(skipped, SiliconSkip) and "not in capplan's catalog" in skipped.reason


def test_the_runs_a_reference_row_measured_are_found() -> None:
    rows, skipped = read_silicon()
    assert len(rows) + len(skipped) == 3619
    reference = load_perf_measurements().rows
    seen = overlaps(rows, reference)
    assert seen and seen < {row.id for row in rows}
    keys = {(r.config_model, r.gpu, r.engine, r.tp, r.input_len, r.output_len, r.effective_concurrency) for r in reference}
    for row in rows:
        key = (row.config_model, row.gpu, row.engine, row.tp, row.input_len, row.output_len, row.effective_concurrency)
        assert (row.id in seen) == (key in keys)


def test_the_readme_quotes_the_silicon_figures() -> None:
    rows, _ = read_silicon()
    seen = overlaps(rows, load_perf_measurements().rows)
    scored = [row for row in rows if row.id not in seen]
    report = holdout_report(scored)
    table = report.table(lambda o: o.metric)
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    sized = len({o.row_id for o in report.observations})
    assert f"of which the {sized:,} capplan can size as stated" in readme
    assert f"{len(seen)} that repeat a reference row's configuration left out" in readme
    for metric, name in (("tpot", "TPOT"), ("ttft", "TTFT")):
        accuracy, signed = table[metric]
        assert math.isfinite(signed)
        assert f"{name} {accuracy.median_abs_error_pct:.1f} % ({signed:+.1f} %)" in readme


@pytest.mark.slow
def test_the_readme_quotes_what_the_command_reports_on_the_silicon_runs() -> None:
    """`capplan estimate --concurrency` reports the simulated closed loop's TPOT: on these runs, closer than the
    steady-state formula (the README quotes both)."""
    from evaluation.perf_sim import reported_table, sim_report

    rows, _ = read_silicon()
    seen = overlaps(rows, load_perf_measurements().rows)
    report = sim_report([row for row in rows if row.id not in seen])
    reported = reported_table(report, lambda s: s.metric)["tpot"][0].median_abs_error_pct
    steady = report.table(lambda s: s.metric)["tpot"][2].median_abs_error_pct
    assert reported < steady
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert f"on NVIDIA's runs below TPOT from {steady:.1f} % to {reported:.1f} %" in readme
