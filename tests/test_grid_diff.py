"""marts.grid_diff names why each grid row changed between two nights (issue 24's Done-when: an
engine-release bump and a price change each show up, named; unchanged rows do not appear).

Two real nights of the pipeline (registry, GPU catalog, capacity grid, marts, publish) on the small
test catalog: the first plans vLLM at 0.21, the second at 0.22 with the L4's price raised. Which rows
must change is derived from the inputs, not from capplan's output:
- vLLM's default `--gpu-memory-utilization` is 0.90 up to 0.21 and 0.92 from 0.22 (vLLM's
  EngineArgs / CacheConfig default, recorded in capacity/engine_constants.py with its source), so
  every vLLM deployment's KV budget moves by 2 % of the GPU's memory: every vLLM row changes, for
  the engine release;
- a replica's $/hour is its GPUs times the GPU's price, so every L4 row changes, for the price;
- an SGLang or TensorRT-LLM row on the H100 depends on neither: it must not appear.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
import yaml

from tests.conftest import require_extra
from tests.test_warehouse_fixtures import PipelineEnv, make_env, materialize_everything, query

pytestmark = pytest.mark.slow  # two whole nights of their own (the slow group holds those)

PRICED_GPU = "l4-24gb"
NEW_PRICE = 9.75


def _expected_causes(gpu: str, engine: str) -> set[str]:
    return ({"price"} if gpu == PRICED_GPU else set()) | ({"engine_release"} if engine == "vllm" else set())


def _raise_price(catalog: Path) -> None:
    path = catalog / "gpus.yaml"
    skus = yaml.safe_load(path.read_text(encoding="utf-8"))
    (sku,) = [s for s in skus["gpus"] if s["id"] == PRICED_GPU]
    assert sku["price_usd_per_gpu_hour"] != NEW_PRICE
    sku["price_usd_per_gpu_hour"] = NEW_PRICE
    path.write_text(yaml.safe_dump(skus), encoding="utf-8")


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = make_env(tmp_path_factory.mktemp("diff"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CAPPLAN_VLLM_RELEASE", "0.21")
        assert materialize_everything(env).success
        first_diff = query(env.warehouse, "select count(*) from marts.grid_diff")
        _raise_price(env.catalog)
        patch.setenv("CAPPLAN_VLLM_RELEASE", "0.22")
        assert materialize_everything(env).success
    return {"env": env, "first_diff": first_diff[0][0]}


def _grid_keys(env: PipelineEnv) -> dict[tuple[Any, ...], tuple[str, str]]:
    rows = query(
        env.warehouse,
        "select model, gpu, engine, weight_dtype, kv_dtype, tp, pp, context from marts.capacity_grid_history",
    )
    return {tuple(row): (str(row[1]), str(row[2])) for row in rows}


def test_the_first_night_has_nothing_to_compare(two_nights: dict[str, Any]) -> None:
    assert two_nights["first_diff"] == 0


def test_an_engine_release_bump_and_a_price_change_are_each_named(two_nights: dict[str, Any]) -> None:
    env: PipelineEnv = two_nights["env"]
    diff = query(
        env.warehouse,
        "select model, gpu, engine, weight_dtype, kv_dtype, tp, pp, context, change, causes, "
        "engine_version_before, engine_version_after, usd_per_hour_before, usd_per_hour_after, num_gpus "
        "from marts.grid_diff",
    )
    changed = {tuple(row[:8]): row for row in diff}
    assert len(changed) == len(diff), "one diff row per grid row"
    keys = _grid_keys(env)
    must_change = {k for k, (gpu, engine) in keys.items() if _expected_causes(gpu, engine)}
    must_not = set(keys) - must_change
    assert must_change and must_not
    assert set(changed) == must_change, "exactly the rows under a changed input"
    for row in diff:
        gpu, engine, change, causes = row[1], row[2], row[8], row[9]
        assert set(causes) == _expected_causes(gpu, engine), row
        if engine == "vllm" and change == "changed":
            assert (row[10], row[11]) == ("0.21", "0.22")
        if gpu == PRICED_GPU and change == "changed":
            assert row[13] == pytest.approx(row[14] * NEW_PRICE)
            assert row[12] != row[13]
    both = {tuple(sorted(set(r[9]))) for r in diff}
    assert ("price",) in both and ("engine_release",) in both and ("engine_release", "price") in both


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from pipelines.cli import app

    return CliRunner().invoke(app, ["diff", *args])


def test_capplan_diff_answers_in_one_json_object_grouped_by_cause(two_nights: dict[str, Any]) -> None:
    env: PipelineEnv = two_nights["env"]
    keys = _grid_keys(env)
    result = _cli("--json", "--limit", "0", "--warehouse", str(env.warehouse))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == {"before", "after", "changed_rows", "by_cause", "rows"}
    expected: dict[str, int] = {}
    for gpu, engine in keys.values():
        causes = _expected_causes(gpu, engine)
        if causes:
            name = "+".join(sorted(causes))
            expected[name] = expected.get(name, 0) + 1
    assert document["by_cause"] == expected
    assert document["changed_rows"] == len(document["rows"]) == sum(expected.values())
    h100 = json.loads(_cli("--json", "--gpu", "h100-sxm-80gb", "--warehouse", str(env.warehouse)).stdout)
    assert set(h100["by_cause"]) == {"engine_release"}
    text = _cli("--limit", "3", "--warehouse", str(env.warehouse)).stdout
    assert "engine_release+price:" in text and "price:" in text and "more rows" in text


def test_release_against_release_moves_the_kv_budget_by_the_default_utilization(two_nights: dict[str, Any]) -> None:
    """vLLM 0.21 -> 0.22: the default --gpu-memory-utilization goes 0.90 -> 0.92 and nothing else that sizes
    the budget, so every row's KV budget per GPU grows by 2 % of the memory the driver reports."""
    env: PipelineEnv = two_nights["env"]
    skus = yaml.safe_load((env.catalog / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]
    (h100,) = [s for s in skus if s["id"] == "h100-sxm-80gb"]
    args = ("--release", "vllm:0.21..0.22", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb")
    result = _cli(*args, "--json", "--limit", "0", "--warehouse", str(env.warehouse))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["before"], document["after"]) == ("vllm 0.21", "vllm 0.22")
    assert set(document["by_cause"]) == {"engine_release"} and document["rows"]
    for row in document["rows"]:
        grown = row["kv_budget_bytes_per_gpu_after"] - row["kv_budget_bytes_per_gpu_before"]
        assert grown == pytest.approx(0.02 * h100["memory_total_bytes"], abs=2), row


def test_release_0_34_sizes_the_cache_after_warmup(two_nights: dict[str, Any]) -> None:
    """vLLM 0.33 -> 0.34: utilization 0.92 -> 1.0 less what the measured sizing keeps free (tests/
    test_vllm_measured_sizing.py derives it): an H100 row's KV budget grows at TP 1-2, by less than the 8 % of memory
    the utilization frees; above TP 2 the NVLS buffers the device lacks at init take part of it back (0.33 left them
    in its 8 %), so those rows grow less, or shrink."""
    env: PipelineEnv = two_nights["env"]
    args = ("--release", "vllm:0.33..0.34", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb")
    result = _cli(*args, "--json", "--limit", "0", "--warehouse", str(env.warehouse))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["before"], document["after"]) == ("vllm 0.33", "vllm 0.34") and document["rows"]
    growth: dict[int, set[int]] = {}
    for row in document["rows"]:
        grown = row["kv_budget_bytes_per_gpu_after"] - row["kv_budget_bytes_per_gpu_before"]
        growth.setdefault(row["tp"], set()).add(grown)
        if row["tp"] <= 2:
            assert 0 < grown < 0.08 * 80e9, (row["tp"], row["pp"], grown)
    small = min(min(g) for tp, g in growth.items() if tp <= 2)
    assert all(max(g) < small for tp, g in growth.items() if tp > 2), growth


def test_a_release_diff_without_a_run_or_a_registry_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing published and no registry: one line, and no database file left behind (read-only)."""
    monkeypatch.setenv("CAPPLAN_REGISTRY_URL", f"sqlite:///{tmp_path / 'registry.db'}")
    result = _cli("--release", "vllm:0.33..0.34", "--warehouse", str(tmp_path / "warehouse.duckdb"))
    assert result.exit_code == 2 and "run `capplan nightly` first" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--release", "sglang:0.5..0.6"), "only vllm has releases"),
        (("--release", "vllm:0.21"), "expected ENGINE:OLD..NEW"),
        (("--release", "tgi:1..2"), "unknown engine"),
        (("--release", "vllm:0.1..0.33"), "no rules for vLLM 0.1"),
        (("--nights", "--release", "vllm:0.21..0.22"), "give one"),
        (("--release", "vllm:0.21..0.22", "--model", "acme/none"), "unknown model 'acme/none'"),
    ],
)
def test_bad_requests_are_one_line_errors(two_nights: dict[str, Any], args: tuple[str, ...], message: str) -> None:
    result = _cli(*args, "--warehouse", str(two_nights["env"].warehouse))
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_the_fleet_release_diff_plans_only_what_the_fleet_runs_at_its_release_and_the_newest(
    two_nights: dict[str, Any],
) -> None:
    import polars as pl

    from capacity.engine_constants import VLLM_SUPPORTED_VERSIONS
    from recommendations.grid_diff import fleet_release_diffs

    env: PipelineEnv = two_nights["env"]
    con = duckdb.connect(str(env.warehouse), read_only=True)
    try:
        models, gpus = con.sql("select * from raw.models").pl(), con.sql("select * from raw.gpus").pl()
    finally:
        con.close()
    fleet = pl.DataFrame(
        {
            "engine": ["vllm", "vllm", "sglang", "vllm", "vllm"],
            "engine_version": ["0.21.0", VLLM_SUPPORTED_VERSIONS[-1] + ".0", "0.5.23", "9.9.9", None],
            "model_id": ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-32B", "Qwen/Qwen3-32B", "x"],
            "gpu_sku": ["h100-sxm-80gb", "l4-24gb", "h100-sxm-80gb", "h100-sxm-80gb", "l4-24gb"],
        }
    )
    rows = fleet_release_diffs(models, gpus, fleet)
    assert rows.height > 0
    # only the one deployment on a release older than the newest, and known: the others are the newest,
    # another engine, a release capplan has no rules for, or no release at all
    assert set(rows.select("fleet_release", "next_release", "model", "gpu").unique().iter_rows()) == {
        ("0.21", VLLM_SUPPORTED_VERSIONS[-1], "meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb")
    }
    assert set(rows["cause"]) == {"engine_release"} and set(rows["engine"]) == {"vllm"}
    assert set(rows.select("engine_version_before", "engine_version_after").unique().iter_rows()) <= {
        ("0.21", VLLM_SUPPORTED_VERSIONS[-1]),
        (None, VLLM_SUPPORTED_VERSIONS[-1]),
        ("0.21", None),
    }


def test_a_night_that_changed_nothing_has_no_rows_and_names_the_runs(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    for _ in range(2):
        assert materialize_everything(env).success
    assert query(env.warehouse, "select count(*) from marts.grid_diff") == [(0,)]
    document = json.loads(_cli("--json", "--warehouse", str(env.warehouse)).stdout)
    assert document["changed_rows"] == 0 and document["rows"] == [] and document["by_cause"] == {}
    published = query(env.warehouse, "select run_id from marts.runs order by started_at")
    assert [document["before"], document["after"]] == [r[0] for r in published]
    assert "nothing changed" in _cli("--warehouse", str(env.warehouse)).stdout


def test_the_report_says_what_changed_for_its_model(two_nights: dict[str, Any], tmp_path: Path) -> None:
    require_extra("report", "altair", "great_tables", "vl_convert")
    from typer.testing import CliRunner

    from pipelines.cli import app

    env: PipelineEnv = two_nights["env"]
    model = "meta-llama/Llama-3.1-8B-Instruct"
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "--model", model, "--out", str(out), "--warehouse", str(env.warehouse)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    section = page.split("What changed since the previous run", 1)[1].split("<h2", 1)[0]
    expected = sum(
        1 for key, (gpu, engine) in _grid_keys(env).items() if key[0] == model and _expected_causes(gpu, engine)
    )
    assert f"{expected:,} rows of this model" in section
    assert "<b>engine_release+price</b>" in section and "<b>price</b>" in section


def test_a_pinned_release_without_rules_fails_the_grid_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from pipelines.assets.capacity import VLLM_RELEASE_ENV, GridConfig, grid_options

    monkeypatch.setenv(VLLM_RELEASE_ENV, "0.32.0")
    assert grid_options(GridConfig()).vllm_version == "0.32.0"
    assert grid_options(GridConfig(vllm_release="0.21")).vllm_version == "0.21", "the run's config wins"
    monkeypatch.setenv(VLLM_RELEASE_ENV, "9.9")
    with pytest.raises(dg.Failure) as failure:
        grid_options(GridConfig())
    assert "CAPPLAN_VLLM_RELEASE=9.9: no rules for that vLLM release" in str(failure.value.description)
    assert "\n" not in str(failure.value.description)
    monkeypatch.delenv(VLLM_RELEASE_ENV)
    assert grid_options(GridConfig()).vllm_version is None, "unset: the newest release capplan knows"
