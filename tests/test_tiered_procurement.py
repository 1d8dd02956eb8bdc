"""Procurement with KV tiers (issue 23 item 7): the fleet plan buys fewer GPUs plus host RAM where the workload's
hit rate and TTFT target allow it, and GPUs (or recompute) where they do not.

The workload, every number derived by hand: Llama-3.1-8B-Instruct (32 layers, 8 KV heads of 128, bf16: 2 x 32 x
8 x 128 x 2 = 131,072 B of KV per token) on H100 SXM at TP 1, 256 sequences of 8,192 tokens (8,000 prompt +
192 output), a 90 % prefix hit rate and no shared prefix:

* each request hits floor(0.9 x 8,000) = 7,200 prompt tokens; over one request's lifetime 256 requests arrive
  (Little's law), so the prefixes kept are K = 256 x 7,200 = 1,843,200 tokens;
* in host RAM: 1,843,200 x 131,072 B = 225 GiB; at $0.0036/GiB-hour (AWS us-east-1 on-demand r7i.large minus
  c7i.large: $0.1323 - $0.0893 = $0.043/h for 16 - 4 = 12 GiB more) that is $0.81/h;
* loaded on a hit over PCIe Gen5 (64 GB/s one way): 7,200 x 131,072 B / 64e9 B/s = 14.7456 ms before the
  first token;
* in the GPU pools: K is ceil(1,843,200 / 8,192) = 225 sequences' worth of blocks, held beside the 256 running;
* a replica's pool holds B_max = num_blocks // cdiv(8,192, 16) sequences (vLLM's block pool, 512 blocks a
  sequence; the estimate's num_blocks is the pool's size), planned at floor(0.9 x B_max).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from capacity.calibration import fit_calibration
from capacity.estimate import estimate
from capacity.spec import DeploymentSpec
from models_registry.planning import Catalog, bundled_catalog
from recommendations.fleet_answer import fleet_contract, fleet_frames
from recommendations.placements import placement_frames
from recommendations.workloads import parse_workloads

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
H100 = "h100-sxm-80gb"
RAM_SOURCE = "AWS us-east-1 on-demand r7i.large - c7i.large, per GiB of the difference"
CONCURRENCY, CONTEXT, OUTPUT = 256, 8192, 192
K_TOKENS = 256 * 7200
HOST_GIB = K_TOKENS * 131_072 / (1 << 30)
LOAD_MS = 7200 * 131_072 / 64e9 * 1e3


def _file(ttft_ms: float, usd_per_gib_hour: float | None, hit_rate: float = 0.9) -> dict[str, Any]:
    chat = {
        "name": "chat",
        "model": LLAMA,
        "target_concurrency": CONCURRENCY,
        "context_tokens": CONTEXT,
        "output_tokens": OUTPUT,
        "max_model_len": CONTEXT,
        "gpus": [H100],
        "max_gpus_per_replica": 1,
        "prefix_hit_rate": hit_rate,
        "ttft_ms_target": ttft_ms,
    }
    procurement: dict[str, Any] = {"whole_nodes": False}
    if usd_per_gib_hour is not None:
        procurement["host_memory"] = {"usd_per_gib_hour": usd_per_gib_hour, "source": RAM_SOURCE}
    return {"workloads": [chat], "procurement": procurement}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return bundled_catalog([LLAMA], [H100])


def _planned_per_replica(catalog: Catalog) -> int:
    """floor(0.9 x B_max), B_max = num_blocks // 512 (below the engine's max_num_seqs)."""
    est = estimate(catalog.models[LLAMA].spec, DeploymentSpec(max_model_len=CONTEXT), gpu=catalog.gpus[H100])
    b_max = min(est.num_blocks // (CONTEXT // 16), est.max_num_seqs or 10**9)
    return math.floor(b_max * 0.9)


def _plan(catalog: Catalog, file: dict[str, object]) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    workloads = parse_workloads(file)
    assert not workloads.errors
    placements, procurement, buckets = fleet_frames(workloads, catalog, fit_calibration([]))
    by_tier = {row["kv_tier"]: row for row in placements.iter_rows(named=True)}
    return by_tier, fleet_contract(placements, procurement, buckets)


def test_a_200_ms_ttft_at_a_90_percent_hit_rate_buys_fewer_gpus_plus_host_ram(catalog: Catalog) -> None:
    """Recomputing 8,000 prompt tokens misses 200 ms on an H100, so the choice is host RAM or more GPUs:
    host: ceil(256 / B) replicas + $0.81/h; GPU: ceil((256 + 225) / B) replicas. With B = 48 (B_max 54):
    6 GPUs + $0.81/h against 11 GPUs; at the H100's price the host tier is cheaper, per hour and per million
    tokens (the same tokens served)."""
    tiers, plan = _plan(catalog, _file(200.0, 0.0036))
    planned = _planned_per_replica(catalog)
    price = catalog.gpus[H100].price_usd_per_gpu_hour or 0.0
    host, gpu = tiers["host"], tiers["gpu"]
    assert "none" not in tiers  # recompute misses the TTFT target at every batch
    assert host["replicas"] == math.ceil(CONCURRENCY / planned)
    assert gpu["replicas"] == math.ceil((CONCURRENCY + math.ceil(K_TOKENS / CONTEXT)) / planned)
    assert host["host_memory_gib"] == pytest.approx(HOST_GIB) == 225.0
    assert host["host_usd_per_hour"] == pytest.approx(225.0 * 0.0036)
    assert host["ttft_ms"] - gpu["ttft_ms"] == pytest.approx(LOAD_MS)
    assert host["in_fleet_plan"] and not gpu["in_fleet_plan"]
    host_usd = host["replicas"] * price + 225.0 * 0.0036
    assert plan["usd_per_hour"] == pytest.approx(host_usd, abs=1e-4)
    assert host_usd < gpu["replicas"] * price
    # $ per million tokens: the plan's $/h over the tokens the workload's sequences produce (the same with
    # either tier: one replica's tokens/s at B, x 256 / B sequences) -> host's is the lower
    tokens_per_hour = host["output_tokens_per_second"] / host["planned_per_replica"] * CONCURRENCY * 3600
    per_million = {
        tier: usd / tokens_per_hour * 1e6 for tier, usd in (("host", host_usd), ("gpu", gpu["usd_per_hour"]))
    }
    assert per_million["host"] < per_million["gpu"]
    assert plan["assignments"][0]["kv_tier"] == "host" and RAM_SOURCE in plan["assignments"][0]["kv_tier_reason"]
    assert any("KV tier host chosen" in note and "225.0 GiB host RAM" in note for note in plan["notes"])


def test_a_loose_ttft_recomputes_and_dear_ram_buys_the_gpus(catalog: Catalog) -> None:
    """At 500 ms recomputing meets the target with the running set's replicas and no RAM: recompute is chosen.
    At 200 ms with RAM at $1/GiB-hour the host tier costs 6 GPUs + $225/h, more than 11 GPUs: the GPUs win."""
    tiers, plan = _plan(catalog, _file(500.0, 0.0036))
    assert tiers["none"]["in_fleet_plan"] and plan["assignments"][0]["kv_tier"] == "none"
    assert not any(a["host_memory_gib"] for a in plan["assignments"])
    tiers, plan = _plan(catalog, _file(200.0, 1.0))
    price = catalog.gpus[H100].price_usd_per_gpu_hour or 0.0
    assert tiers["host"]["replicas"] * price + 225.0 > tiers["gpu"]["replicas"] * price
    assert tiers["gpu"]["in_fleet_plan"] and plan["usd_per_hour"] == pytest.approx(tiers["gpu"]["replicas"] * price)


def test_without_a_host_price_the_plan_is_the_untiered_one(catalog: Catalog) -> None:
    """No `procurement.host_memory`: no tier columns, the same placements and $/h as before tiers existed."""
    workloads = parse_workloads(_file(200.0, None))
    placements, _procurement, plan = placement_frames(workloads, catalog, fit_calibration([]))
    assert placements["kv_tier"].null_count() == placements.height
    assert plan.host_usd_per_hour == 0.0
    assert placements.filter("in_fleet_plan")["replicas"].to_list() == [
        math.ceil(CONCURRENCY / _planned_per_replica(catalog))
    ]


def test_capplan_procure_says_what_it_bought_and_why(tmp_path: object, catalog: Catalog) -> None:
    from pathlib import Path

    import yaml
    from typer.testing import CliRunner

    from pipelines.cli import app

    path = Path(str(tmp_path)) / "workloads.yaml"
    path.write_text(yaml.safe_dump(_file(200.0, 0.0036)))
    result = CliRunner().invoke(
        app, ["procure", "--workloads", str(path), "--warehouse", str(Path(str(tmp_path)) / "none.duckdb")]
    )
    assert result.exit_code == 0, result.output
    assert "225.0 GiB host RAM for KV tiers = $0.81/h: chat" in result.output
    assert "KV tier host:" in result.output


NVME = {"usd_per_gib_hour": 0.0001, "source": "illustrative drive price", "read_gbps": 7.0}


def test_local_nvme_is_bought_where_its_slower_read_fits_the_ttft(catalog: Catalog) -> None:
    """NVMe at $0.0001/GiB-hour, read at 7 GB/s (a PCIe Gen4 x4 drive): the 225 GiB cost 225 x 0.0001 =
    $0.0225/h, less than host RAM's $0.81/h, but a hit reads 7,200 x 131,072 B / 7e9 B/s = 134.8169 ms from the
    drives (slower than the 14.7456 ms over PCIe, so the drives set the load). With the GPU option's TTFT
    t (the same layout, the prefixes on the GPU) the disk option's is t + 134.8169 ms: within a 200 ms target
    it is chosen; at 150 ms it is not offered where t + 134.8 > 150, and host RAM is bought instead."""
    document = _file(200.0, 0.0036)
    document["procurement"]["local_nvme"] = NVME
    tiers, plan = _plan(catalog, document)
    nvme_load_ms = 7200 * 131_072 / 7e9 * 1e3
    assert tiers["disk"]["ttft_ms"] - tiers["gpu"]["ttft_ms"] == pytest.approx(nvme_load_ms)
    assert tiers["disk"]["host_usd_per_hour"] == pytest.approx(225 * 0.0001)
    assert tiers["disk"]["in_fleet_plan"] and plan["assignments"][0]["kv_tier"] == "disk"
    price = catalog.gpus[H100].price_usd_per_gpu_hour or 0.0
    assert plan["usd_per_hour"] == pytest.approx(tiers["disk"]["replicas"] * price + 225 * 0.0001, abs=1e-4)
    tight = _file(150.0, 0.0036)
    tight["procurement"]["local_nvme"] = NVME
    tiers, plan = _plan(catalog, tight)
    assert ("disk" in tiers) == (tiers["gpu"]["ttft_ms"] + nvme_load_ms <= 150.0)
    assert plan["assignments"][0]["kv_tier"] == ("disk" if "disk" in tiers else "host")


def test_a_bad_nvme_price_is_a_one_line_procurement_error() -> None:
    for bad in ({"usd_per_gib_hour": 0.0001, "source": "x"}, {**NVME, "read_gbps": 0}, {**NVME, "read_gbps": "7"}):
        errors = parse_workloads({"workloads": [], "procurement": {"local_nvme": bad}}).errors
        assert errors and errors[0][0] == "<procurement>" and "\n" not in errors[0][1], bad


def test_procure_recomputes_where_the_published_tiers_are_priced_otherwise() -> None:
    """A published host row of 225 GiB at $0.81/h was priced $0.81 / 225 = $0.0036/GiB-hour: the same file reuses
    it; a file at $0.005, without a price, or tiering no workload does not."""
    import polars as pl

    from pipelines.commands.procure import _tiers_stale

    published = pl.DataFrame(
        {"workload": ["chat", "chat"], "kv_tier": ["host", "gpu"], "host_memory_gib": [225.0, 0.0]}
        | {"host_usd_per_hour": [0.81, 0.0]}
    )
    assert _tiers_stale(published, parse_workloads(_file(200.0, 0.0036))) is None
    assert "priced host RAM otherwise" in str(_tiers_stale(published, parse_workloads(_file(200.0, 0.005))))
    assert "tiered other workloads" in str(_tiers_stale(published, parse_workloads(_file(200.0, None))))
    untiered = published.with_columns(pl.lit(None, pl.String).alias("kv_tier"))
    assert _tiers_stale(untiered, parse_workloads(_file(200.0, None))) is None
