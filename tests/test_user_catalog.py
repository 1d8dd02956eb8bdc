"""Your fleet, your prices: the user catalog (`CAPPLAN_USER_CATALOG`) layered over the GPU catalog and read
by every path (estimate, registry ingest, the grid, placements, procurement); each price's basis and source.

Oracles: the example file docs/examples/user-catalog.yaml (the README's), read here as plain YAML; the
price-choice rule as the user catalog's docstring states it, applied by hand to hand-built offers; the
bundled gpus.yaml's own `price_source` text for each `price_basis`.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml
from typer.testing import CliRunner

from capacity.placement import ProcurementPlan
from capacity.spec import PriceBasis
from models_registry.frames import current_models_frame, gpu_skus_frame
from models_registry.sources.bundled import CATALOG_DIR
from models_registry.sources.gpu_catalog import Commitment, find_gpu_sku, load_gpu_skus
from models_registry.sources.user_catalog import (
    PriceOffer,
    PricePolicy,
    UserCatalogError,
    effective_gpu_records,
    gpu_catalog_for,
)
from pipelines.cli import app
from tests.conftest import ROOT, require_extra

EXAMPLE = ROOT / "docs" / "examples" / "user-catalog.yaml"
USER_ENV = "CAPPLAN_USER_CATALOG"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


# --- the example file, layered ------------------------------------------------------------------------


def test_the_example_adds_a_gpu_sets_its_node_and_overrides_a_bundled_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_ENV, str(EXAMPLE))
    document = _example()
    records, errors = gpu_catalog_for()
    assert errors == []
    by_id = {r.id: r for r in records}
    added = document["gpus"][0]
    acme = by_id[added["id"]]
    assert acme.memory_total_bytes == added["memory_total_bytes"] and acme.name == added["name"]
    assert acme.gpus_per_node == document["nodes"][added["id"]]["gpus_per_node"]
    assert by_id["l40s-48gb"].memory_bandwidth_gbps == document["overrides"]["l40s-48gb"]["memory_bandwidth_gbps"]
    # everything the file does not name is the bundled catalog's, field for field
    plain = yaml.safe_load((CATALOG_DIR / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]
    l4 = next(e for e in plain if e["id"] == "l4-24gb")
    assert by_id["l4-24gb"].memory_total_bytes == l4["memory_total_bytes"]
    assert by_id["l4-24gb"].price_usd_per_gpu_hour == l4["price_usd_per_gpu_hour"]
    # the GPU answers to its aliases, as a bundled one does
    assert find_gpu_sku("ACME X1").id == added["id"]


def test_the_example_policy_chooses_each_price_by_the_documented_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """By hand from the file: acme-x1 has two acme-cloud offers (both allowed): the cheaper wins. h100-sxm has
    the bundled AWS price and the our-dc offer: our-dc comes before aws in `providers`, so it wins though a
    cheaper AWS one would not matter. A bundled price with no provider is outside a set `providers` list."""
    monkeypatch.setenv(USER_ENV, str(EXAMPLE))
    document = _example()
    by_id = {r.id: r for r in effective_gpu_records()}
    acme_offers = document["prices"]["acme-x1-64gb"]
    cheapest = min(acme_offers, key=lambda o: o["usd_per_gpu_hour"])
    acme = by_id["acme-x1-64gb"]
    assert acme.price_usd_per_gpu_hour == cheapest["usd_per_gpu_hour"]
    assert acme.price_source == cheapest["source"] and acme.price_commitment == Commitment(cheapest["commitment"])
    assert acme.price_basis is PriceBasis.CONTRACT  # no basis given: the user's own price
    assert acme.max_gpus_available == cheapest["max_gpus"]
    ours = document["prices"]["h100-sxm-80gb"][0]
    h100 = by_id["h100-sxm-80gb"]
    assert (h100.price_usd_per_gpu_hour, h100.price_provider, h100.price_region) == (
        ours["usd_per_gpu_hour"],
        ours["provider"],
        ours["region"],
    )
    plain = yaml.safe_load((CATALOG_DIR / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]
    unnamed = [e["id"] for e in plain if e.get("price_usd_per_gpu_hour") is not None and not e.get("price_provider")]
    assert unnamed and all(by_id[g].price_usd_per_gpu_hour is None for g in unnamed)


def _offer(price: float, provider: str | None = None, **more: object) -> PriceOffer:
    return PriceOffer(usd_per_gpu_hour=price, basis=PriceBasis.LIST, provider=provider, **more)  # type: ignore[arg-type]


def test_price_policy_filters_then_prefers_then_takes_the_cheapest() -> None:
    aws, gcp, mine = _offer(6.0, "aws", region="us-east-1"), _offer(5.0, "gcp", region="us-central1"), _offer(7.0, "me")
    assert PricePolicy().choose([aws, gcp, mine]) is gcp  # no policy: the lowest price
    assert PricePolicy(providers=("me", "aws")).choose([aws, gcp, mine]) is mine  # first preferred, dearer or not
    assert PricePolicy(providers=("aws", "me")).choose([aws, gcp, mine]) is aws
    assert PricePolicy(regions=("us-east-1",)).choose([aws, gcp, mine]) is aws  # `mine` states no region
    assert PricePolicy(providers=("azure",)).choose([aws, gcp]) is None  # nothing left: no price
    spot = _offer(2.0, "aws", commitment=Commitment.SPOT)
    on_demand = _offer(6.0, "aws", commitment=Commitment.ON_DEMAND)
    assert PricePolicy(commitments=(Commitment.ON_DEMAND,)).choose([spot, on_demand]) is on_demand
    catalogs, yours = _offer(3.0, "aws"), _offer(3.0, "aws", source="our quote")
    assert PricePolicy().choose([catalogs, yours]) is yours  # a tie goes to the later (user's) offer


# --- every path reads it --------------------------------------------------------------------------------


def test_estimate_sizes_a_user_gpu_with_the_files_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_ENV, str(EXAMPLE))
    added = _example()["gpus"][0]
    code, out, err = _cli("estimate", MODEL, "--gpu", added["id"], "--json")
    assert code == 0, err
    answer = json.loads(out)
    assert answer["gpu"] == added["id"] and answer["gpu_memory_bytes"] == added["memory_total_bytes"]
    # the same question on the hardware alone (--gpu-memory-gib) gives the same budget
    gib = added["memory_total_bytes"] / 2**30
    code, out, err = _cli("estimate", MODEL, "--gpu-memory-gib", repr(gib), "--json")
    assert code == 0, err
    assert json.loads(out)["gpu_memory_bytes"] == added["memory_total_bytes"]


def test_a_gpu_added_through_catalog_dir_is_known_to_estimate_and_registry_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    """The issue's report: a GPU in CAPPLAN_CATALOG_DIR reached the grid, but estimate said 'unknown GPU'
    and `registry ingest` ignored the variable."""
    catalog = tmp_path / "catalog"
    shutil.copytree(CATALOG_DIR, catalog)
    document = yaml.safe_load((catalog / "gpus.yaml").read_text(encoding="utf-8"))
    document["gpus"].append(_example()["gpus"][0])
    (catalog / "gpus.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    monkeypatch.setenv("CAPPLAN_CATALOG_DIR", str(catalog))
    monkeypatch.delenv(USER_ENV, raising=False)
    assert find_gpu_sku("acme-x1-64gb").memory_total_bytes == 68182605824
    code, out, err = _cli("estimate", MODEL, "--gpu", "acme-x1-64gb", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu"] == "acme-x1-64gb"
    code, _out, err = _cli("registry", "ingest")
    assert code == 0, err
    assert "acme-x1-64gb" in set(gpu_skus_frame(sqlite_url)["slug"])
    code, out, err = _cli("registry", "list", "--gpus")
    assert code == 0 and "acme-x1-64gb" in out, err


def test_registry_ingest_and_the_grid_see_the_user_gpu_and_its_price(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(USER_ENV, str(EXAMPLE))
    document = _example()
    code, _out, err = _cli("registry", "ingest")
    assert code == 0, err
    gpus = gpu_skus_frame(sqlite_url)
    acme = gpus.filter(pl.col("slug") == "acme-x1-64gb").row(0, named=True)
    cheapest = min(document["prices"]["acme-x1-64gb"], key=lambda o: o["usd_per_gpu_hour"])
    assert acme["gpus_per_node"] == 4 and acme["price_usd_per_gpu_hour"] == cheapest["usd_per_gpu_hour"]
    assert (acme["price_basis"], acme["price_provider"], acme["price_commitment"], acme["price_source"]) == (
        "contract",
        cheapest["provider"],
        cheapest["commitment"],
        cheapest["source"],
    )
    from warehouse.capacity_grid import capacity_frames

    models = current_models_frame(sqlite_url).filter(pl.col("repo_id") == MODEL)
    frames = capacity_frames(models, gpus.filter(pl.col("slug") == "acme-x1-64gb"))
    deployments = frames.deployments
    assert deployments.height > 0 and set(deployments["gpu"]) == {"acme-x1-64gb"}
    # the node holds 4 (the file's nodes:), so no tensor-parallel group is larger
    assert deployments["tp"].max() <= 4 and 4 in set(deployments["tp"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "schema_version: 1\ngpus:\n  - {id: acme-x2, name: X2, vendor: acme}\n",
            "gpus[0] (acme-x2): memory_total_bytes is missing",
        ),
        (
            "schema_version: 1\nprices:\n  l4-24gb:\n    - {usd_per_gpu_hour: -1}\n",
            "prices.l4-24gb[0]: usd_per_gpu_hour must be positive",
        ),
        (
            "schema_version: 1\nprices:\n  l4-24gb:\n    - {usd_per_gpu_hour: 1, commitment: 2y}\n",
            "prices.l4-24gb[0]: commitment must be one of on-demand, spot, 1y, 3y",
        ),
        (
            "schema_version: 1\nprices:\n  l4-24gb:\n    - {usd_per_gpu_hour: 1, vendor: x}\n",
            "prices.l4-24gb[0]: unknown field 'vendor'",
        ),
        ("schema_version: 1\nprices:\n  no-such-gpu:\n    - {usd_per_gpu_hour: 1}\n", "prices.no-such-gpu: no GPU"),
        ("schema_version: 1\noverrides:\n  no-such-gpu: {gpus_per_node: 4}\n", "overrides.no-such-gpu: no GPU"),
        (
            "schema_version: 1\noverrides:\n  l4-24gb: {memory_bandwidth_gbps: fast}\n",
            "overrides.l4-24gb: memory_bandwidth_gbps must be a number",
        ),
        ("schema_version: 1\nnodes:\n  l4-24gb: {price: 1}\n", "nodes.l4-24gb: unknown field 'price'"),
        ("schema_version: 1\noverrides:\n  l4-24gb: {bandwidth: 1}\n", "overrides.l4-24gb: unknown field 'bandwidth'"),
        (
            "schema_version: 1\ngpus:\n  - {id: acme-x2, name: X2, vendor: acme, memory_total_bytes: 2147483648, hbm: 2}\n",
            "gpus[0] (acme-x2): unknown field 'hbm'",
        ),
        ("schema_version: 1\nprice_policy: {providers: aws}\n", "price_policy: providers must be a list"),
        ("schema_version: 1\ngpu: []\n", "gpu: unknown section"),
        ("schema_version: 1\ngpus: [\n", "is not valid YAML"),
        ("schema_version: 2\n", "unsupported schema_version"),
    ],
)
def test_a_malformed_user_catalog_is_one_line_naming_the_file_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, expected: str
) -> None:
    path = tmp_path / "my-catalog.yaml"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setenv(USER_ENV, str(path))
    with pytest.raises(UserCatalogError, match=r"my-catalog\.yaml"):
        effective_gpu_records()
    code, out, err = _cli("estimate", MODEL, "--gpu", "l4-24gb")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("capplan: error: my-catalog.yaml") and expected in lines[0], lines[0]


def test_a_missing_user_catalog_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(USER_ENV, str(tmp_path / "nope.yaml"))
    code, _out, err = _cli("estimate", MODEL, "--gpu", "l4-24gb")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nope.yaml" in err


def test_without_a_user_catalog_the_default_is_the_bundled_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USER_ENV, raising=False)
    monkeypatch.delenv("CAPPLAN_CATALOG_DIR", raising=False)
    assert load_gpu_skus() == load_gpu_skus(CATALOG_DIR / "gpus.yaml")


# --- what each bundled price rests on ---------------------------------------------------------------------


def test_each_bundled_price_basis_agrees_with_its_source_text() -> None:
    """list: one provider's offer the text names (provider in the text, on-demand, no estimate wording);
    estimate: the text says so, names a class of providers, or the part has no global list price."""
    entries = yaml.safe_load((CATALOG_DIR / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]
    priced = [e for e in entries if e.get("price_usd_per_gpu_hour") is not None]
    assert priced and all(e.get("price_basis") in ("list", "estimate") for e in priced)
    for entry in priced:
        text = entry["price_source"].lower()
        weak = any(word in text for word in ("estimate", "china-market", "-class", "typical", "no global"))
        if entry["price_basis"] == "list":
            assert not weak, entry["id"]
            assert entry.get("price_provider") and entry["price_provider"] in text, entry["id"]
            assert "on-demand" in text and entry["price_commitment"] == "on-demand", entry["id"]
        else:
            assert weak, entry["id"]
    # the two parts the issue found the default plan buying
    basis = {e["id"]: e.get("price_basis") for e in priced}
    assert basis["h20-3e-141gb"] == "estimate" and basis["gh200-96gb"] == "estimate"


def _shipped_plan(allow_estimated_prices: bool) -> tuple[pl.DataFrame, ProcurementPlan]:
    from capacity.calibration import fit_calibration
    from models_registry.planning import bundled_catalog
    from recommendations.buckets import bucket_demands
    from recommendations.placements import placement_frames
    from recommendations.workloads import load_workloads, parse_workloads

    document = yaml.safe_load((ROOT / "workloads.yaml").read_text(encoding="utf-8"))
    if allow_estimated_prices:
        document.setdefault("procurement", {})["allow_estimated_prices"] = True
    workloads = parse_workloads(document, ROOT / "workloads.yaml")
    assert workloads.errors == load_workloads(ROOT / "workloads.yaml").errors
    catalog = bundled_catalog([m for p in workloads.profiles for m in p.models])
    fit = fit_calibration([])
    demands, _skipped = bucket_demands(workloads, catalog, fit)
    _placements, procurement, plan = placement_frames(workloads, catalog, fit, bucket_demands=demands)
    return procurement, plan


@pytest.mark.slow
def test_the_default_plan_buys_only_list_priced_parts_and_opting_in_can_buy_estimates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_extra("solver", "highspy")
    monkeypatch.delenv(USER_ENV, raising=False)
    monkeypatch.delenv("CAPPLAN_CATALOG_DIR", raising=False)
    entries = yaml.safe_load((CATALOG_DIR / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]
    basis = {e["id"]: e.get("price_basis") for e in entries}
    default, default_plan = _shipped_plan(False)
    assert default.height > 0
    assert {basis[g] for g in default["gpu"]} == {"list"}, default.select("gpu", "usd_per_gpu_hour")
    opted, opted_plan = _shipped_plan(True)
    assert any(basis[g] == "estimate" for g in opted["gpu"])  # the filter is what kept them out
    if default_plan.optimal and opted_plan.optimal:
        # more parts to choose from never makes the optimum dearer
        assert opted["fleet_usd_per_hour"][0] <= default["fleet_usd_per_hour"][0] + 1e-6
    # and the marts say where each bought price comes from
    _check_price_columns(default)


def _check_price_columns(procurement: pl.DataFrame) -> None:
    """marts.procurement_plan and marts.gpus built from their SQL over this plan: every bought row names its
    price's basis, provider and source as gpus.yaml has them."""
    from models_registry.sources.gpu_catalog import read_gpu_catalog
    from warehouse.sql import build_relation

    records = {r.id: r for r in read_gpu_catalog()[0]}
    con = duckdb.connect()
    for schema in ("raw", "staging", "marts"):
        con.execute(f"create schema {schema}")
    build_relation(
        con, "raw", "run", {"run_id": "r1", "run_date": dt.date(2026, 12, 5), "started_at": dt.datetime.now(dt.UTC)}
    )
    gpus = pl.DataFrame(
        [
            {
                "slug": r.id,
                "name": r.name,
                "vendor": r.vendor,
                "memory_total_bytes": r.memory_total_bytes,
                "gpus_per_node": r.gpus_per_node,
                "price_usd_per_gpu_hour": r.price_usd_per_gpu_hour,
                "price_source": r.price_source,
                "price_date": r.price_date,
                "price_basis": r.price_basis.value if r.price_basis else None,
                "price_provider": r.price_provider,
                "price_region": r.price_region,
                "price_commitment": r.price_commitment.value if r.price_commitment else None,
                "max_gpus_available": r.max_gpus_available,
                "aliases": json.dumps(list(r.aliases)),
                "sources": json.dumps(list(r.sources)),
            }
            for r in records.values()
        ]
    )
    missing = ("architecture", "form_factor", "memory_type", "memory_total_basis", "interconnect", "content_sha256")
    numbers = ("memory_marketing_gb", "memory_total_mib_smi", "memory_bandwidth_gbps", "bf16_dense_tflops")
    numbers += ("fp8_dense_tflops", "fp4_dense_tflops", "interconnect_gbps")
    flags = ("fp8_support", "fp4_support", "int8_support")
    gpus = gpus.with_columns(
        *(pl.lit(None, pl.String).alias(c) for c in missing),
        *(pl.lit(None, pl.Float64).alias(c) for c in numbers),
        *(pl.lit(True).alias(c) for c in flags),
    )
    for table, frame in (("gpus", gpus), ("procurement_plan", procurement)):
        con.register("incoming", frame)
        build_relation(con, "raw", table)
        con.unregister("incoming")
        build_relation(con, "staging", table)
        build_relation(con, "marts", table)
    rows = con.execute(
        "select gpu, price_basis, price_provider, price_region, price_commitment, price_source, price_date "
        "from marts.procurement_plan"
    ).fetchall()
    assert len(rows) == procurement.height
    for gpu, basis, provider, region, commitment, source, date in rows:
        record = records[gpu]
        assert (basis, provider, region, source, date) == (
            record.price_basis,
            record.price_provider,
            record.price_region,
            record.price_source,
            record.price_date,
        )
        assert commitment == record.price_commitment
    mart_gpus = {
        r[0]
        for r in con.execute(
            "select column_name from duckdb_columns() where table_name = 'gpus' and schema_name = 'marts'"
        ).fetchall()
    }
    assert {"price_basis", "price_provider", "price_region", "price_commitment", "max_gpus_available"} <= mart_gpus


def test_the_nightly_syncs_the_user_catalog_its_resource_names(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry resource takes CAPPLAN_USER_CATALOG when the definitions load (shown in the Dagster UI);
    the nightly's GPU sync layers that file, and the run's provenance hashes it."""
    from models_registry.frames import sync_gpus
    from pipelines.resources import build_resources
    from warehouse.provenance import catalog_hashes, sha256_file

    monkeypatch.setenv(USER_ENV, str(EXAMPLE))
    registry = build_resources()["registry"].process_config_and_initialize()
    assert registry.user_catalog_path() == EXAMPLE
    monkeypatch.delenv(USER_ENV)
    report = sync_gpus(sqlite_url, registry.catalog_path(), registry.user_catalog_path())
    assert report.errors == [] and "acme-x1-64gb" in set(gpu_skus_frame(sqlite_url)["slug"])
    hashes = catalog_hashes(registry.catalog_path(), registry.user_catalog_path())
    assert (
        hashes["user_catalog_yaml"] == sha256_file(EXAMPLE) and catalog_hashes(CATALOG_DIR)["user_catalog_yaml"] is None
    )
