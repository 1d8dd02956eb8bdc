"""tools/kernel_laws.py: the decode-GEMM law fitted from NVIDIA's kernel tables (latency = floor + bytes / (share x
bandwidth)), checked on points made by hand, and the kept laws' file against its own provenance."""

from __future__ import annotations

import math

import pytest
import yaml

from tools import kernel_laws as kl


def test_the_law_is_recovered_from_points_made_by_hand() -> None:
    # 5 us floor, 80 % of 1 TB/s: 1 MB takes 5 + 1e6 / 0.8e12 s = 6.25 us, 100 MB 130 us, 1 GB 1,255 us
    sizes = [1e6, 1e8, 1e9]
    latency = [5e-6 + size / 0.8e12 for size in sizes]
    law = kl.fit_law(sizes, latency, 1e12)
    assert law.floor_s == pytest.approx(5e-6, rel=1e-9)
    assert law.efficiency == pytest.approx(0.8, rel=1e-9)
    assert law.points == 3


def test_a_law_needs_two_sizes() -> None:
    with pytest.raises(ValueError, match="at least two"):
        kl.fit_law([1e6], [1e-5], 1e12)
    with pytest.raises(ValueError, match="different sizes"):
        kl.fit_law([1e6, 1e6], [1e-5, 2e-5], 1e12)


def test_the_kept_laws_name_their_source_and_are_plausible() -> None:
    document = yaml.safe_load(kl.LAWS_PATH.read_text(encoding="utf-8"))
    assert kl.AIC_VERSION in document["source"]
    assert {entry["catalog_gpu"] for entry in document["gpus"]} <= set(kl.GPUS.values())
    for entry in document["gpus"]:
        assert entry["table"].endswith("gemm_perf.parquet") and entry["release"] in entry["table"]
        for law in entry["laws"].values():
            # a measured share of the datasheet bandwidth, and a floor of microseconds, not a fit gone astray
            assert 0.5 < law["bandwidth_share"] <= 1.0 and 0.0 <= law["floor_us"] < 50.0
            assert law["points"] >= 100
            assert math.isfinite(law.get("large_gemm_flops_share", 0.5))
