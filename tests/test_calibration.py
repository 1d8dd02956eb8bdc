"""Calibration against hand-derived numbers: observed settings -> DeploymentSpec, residuals, robust
bands, scopes from specific to general, the calibrated KV budget and pool, leave-one-out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from capacity.calibration import (
    CALIBRATED_TERM,
    Band,
    Correction,
    Observation,
    ObservedSettings,
    ScopeKey,
    band,
    calibrated_pool,
    engine_profile,
    engine_series,
    engine_version_for,
    fit_calibration,
    leave_one_out,
    observed_deployment,
    pool_numbers,
    resized_pool,
    scope_keys,
)
from capacity.estimate import estimate
from capacity.pool import KVGroup, KVPool, PoolUnit
from capacity.spec import CheckpointQuant, DeploymentSpec
from tests.handmade import dense_spec

GIB = 1 << 30
MIB = 1 << 20
LLAMA = dense_spec()


# --- settings -> deployment ------------------------------------------------------------------------


def test_observed_settings_become_the_deployment_capplan_predicts() -> None:
    plain = observed_deployment(LLAMA, ObservedSettings(dtype="bfloat16", engine_version="0.11.0", tp=2))
    assert (plain.weight_dtype, plain.kv_dtype, plain.engine_version, plain.tp) == ("auto", "auto", "0.11.0", 2)
    online_fp8 = observed_deployment(
        LLAMA, ObservedSettings(dtype="bfloat16", quantization="fp8", kv_cache_dtype="fp8")
    )
    assert (online_fp8.weight_dtype, online_fp8.kv_dtype) == ("fp8", "fp8")
    fp32 = observed_deployment(LLAMA, ObservedSettings(dtype="float32"))
    assert fp32.weight_dtype == "float32"
    awq = replace(dense_spec(), quantization=CheckpointQuant("awq", "int4", 128))
    assert observed_deployment(awq, ObservedSettings(dtype="float16", quantization="awq_marlin")).weight_dtype == "auto"
    total = observed_deployment(LLAMA, ObservedSettings(total_gpu_memory_bytes=79 * GIB, max_model_len=8192))
    assert (total.gpu_memory_bytes, total.max_model_len) == (79 * GIB, 8192)


def test_versions_series_and_profiles() -> None:
    assert engine_version_for(None, "v0") == "0.7.3"  # the last release V0 was the default of
    assert engine_version_for(None, "v1") == "0.11"
    assert engine_version_for("not-a-version", None) == "0.11"
    assert engine_version_for("0.6.3.post1", "v0") == "0.6.3.post1"
    assert engine_series("vllm", "0.6.3.post1") == "0.6"
    assert engine_series("vllm", None) is None
    assert [engine_profile("vllm", v) for v in ("0.6.3", "0.9.2", "0.11.0", "0.19.0")] == [
        "v0",
        "v1-early",
        "v1-mid",
        "v1",
    ]
    assert engine_profile("sglang", "0.4") == "sglang"


def test_scope_keys_most_specific_first() -> None:
    keys = scope_keys("vllm", "0.11.0", "h100-sxm-80gb", "llama")
    assert [k.level for k in keys] == [
        "engine_version_gpu_family",
        "engine_version_gpu",
        "engine_version",
        "engine_profile_gpu",
        "engine_profile",
    ]
    assert keys[0] == ScopeKey("engine_version_gpu_family", "vllm", "0.11", None, "h100-sxm-80gb", "llama")
    assert keys[-1].label() == "engine_profile(engine=vllm, engine_profile=v1-mid)"
    no_gpu = scope_keys("vllm", "0.11.0", None, "llama")
    assert [k.level for k in no_gpu] == ["engine_version", "engine_profile"]


# --- bands -----------------------------------------------------------------------------------------


def test_band_median_mad_and_a_bootstrap_interval() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    fitted = band(values, seed="x")
    assert (fitted.n, fitted.median, fitted.mad) == (5, 3.0, 1.0)  # |v - 3| = 2, 1, 0, 1, 97
    assert fitted.low <= fitted.median <= fitted.high
    assert fitted.low >= 1.0 and fitted.high <= 100.0
    assert band(values, seed="x") == fitted, "seeded: the same interval every run"
    assert band([7.0]) == Band(1, 7.0, 0.0, 7.0, 7.0)
    assert band(values, resamples=0) == Band(5, 3.0, 1.0, 3.0, 3.0)
    with pytest.raises(ValueError):
        band([])


# --- the fit ---------------------------------------------------------------------------------------


def observation(name: str, activation_ratio: float, non_torch_delta: int, gpu: str = "h100", family: str = "llama",
                version: str = "0.11.0", weights: int = 16 * GIB) -> Observation:  # fmt: skip
    """Predicted: weights 16 GiB, activation 2 GiB, non-torch 0.5 GiB, KV 50 GiB; the engine measured
    the activation x ratio and non-torch + delta, and sized its KV pool from them."""
    predicted = {"weights": 16 * GIB, "activation_peak": 2 * GIB, "non_torch": GIB // 2, "kv_pool": 50 * GIB}
    activation = round(2 * GIB * activation_ratio)
    non_torch = GIB // 2 + non_torch_delta
    kv = 50 * GIB - (weights - 16 * GIB) - (activation - 2 * GIB) - non_torch_delta
    measured = {"weights": weights, "activation_peak": activation, "non_torch": non_torch, "kv_pool": kv}
    return Observation(name, "vllm", version, gpu, family, predicted, measured)


THREE = [
    observation("a", 1.05, 200 * MIB),
    observation("b", 1.10, 256 * MIB),
    observation("c", 1.20, 300 * MIB),
]


def test_residuals_are_ratios_and_byte_deltas() -> None:
    a = THREE[0]
    assert a.residual("activation_peak") == pytest.approx(1.05)
    assert a.residual("non_torch") == 200 * MIB
    assert a.residual("weights") == 1.0
    assert a.residual("kv_pool") == pytest.approx((50 * GIB - 0.1 * GIB - 200 * MIB) / (50 * GIB))
    missing = Observation("x", "vllm", "0.11.0", "h100", "llama", a.predicted, {"kv_pool": None})
    assert missing.residual("kv_pool") is None and missing.residual("non_torch") is None


def test_fit_medians_bands_and_the_calibrated_budget() -> None:
    fit = fit_calibration(THREE)
    correction = fit.lookup("vllm", "0.11.2", "h100", "llama")
    assert correction is not None
    assert correction.scope.level == "engine_version_gpu_family" and correction.n_observations == 3
    assert correction.activation_ratio == pytest.approx(1.10)
    assert correction.non_torch_delta_bytes == 256 * MIB
    assert correction.weights_ratio == 1.0
    activation = correction.bands["activation_peak"]
    assert activation.mad == pytest.approx(0.05) and activation.low <= 1.10 <= activation.high
    # 50 GiB - (2 GiB x 0.10 + 256 MiB) = 50 GiB - 460.8 MiB
    assert correction.kv_budget(50 * GIB, 16 * GIB, 2 * GIB, GIB // 2) == 50 * GIB - round(0.2 * GIB) - 256 * MIB
    rows = {(r.scope.level, r.term): r for r in fit.rows}
    assert rows[("engine_version_gpu_family", "non_torch")].correction_kind == "delta_bytes"
    assert rows[("engine_version_gpu_family", "activation_peak")].deployments == ("a", "b", "c")
    assert all(r.usable for r in fit.rows)
    calibrated = rows[("engine_version_gpu_family", CALIBRATED_TERM)]
    assert calibrated.n_observations == 3 and calibrated.band is not None
    kv = rows[("engine_version_gpu_family", "kv_pool")].band
    assert kv is not None
    # after calibration (leave-one-out) the pool is closer to the measurement than before
    assert abs(calibrated.band.median - 1) < abs(kv.median - 1)


def test_too_few_observations_fall_back_to_a_wider_scope_or_none() -> None:
    other_gpu = [*THREE[:2], observation("d", 1.10, 256 * MIB, gpu="a100")]
    fit = fit_calibration(other_gpu)
    h100 = fit.lookup("vllm", "0.11.0", "h100", "llama")
    assert h100 is not None and h100.scope.level == "engine_version" and h100.n_observations == 3
    assert fit.lookup("vllm", "0.19.0", "h100", "llama") is None  # another profile: nothing fitted
    assert fit_calibration(other_gpu, min_observations=4).lookup("vllm", "0.11.0", "h100", "llama") is None
    strict = fit_calibration(other_gpu, min_observations=2).lookup("vllm", "0.11.0", "h100", "llama")
    assert strict is not None and strict.scope.level == "engine_version_gpu_family"
    unusable = [r for r in fit.rows if not r.usable]
    assert {r.scope.gpu for r in unusable} == {"h100", "a100"}
    with pytest.raises(ValueError):
        fit_calibration(THREE, min_observations=0)


def test_leave_one_out_predicts_each_pool_without_itself() -> None:
    identical = [observation(n, 1.10, 256 * MIB) for n in "abcd"]
    fit = fit_calibration(identical)
    results = leave_one_out(identical, fit)
    for obs, result in zip(identical, results, strict=True):
        assert result.correction is not None and result.loo_correction is not None
        assert result.loo_correction.n_observations == 3
        # the others say exactly what this one measured: the leave-one-out pool is right to a byte
        assert result.loo_kv_pool == pytest.approx(obs.measured["kv_pool"], abs=1)
    lonely = leave_one_out(THREE[:1], fit_calibration(THREE[:1]))
    assert lonely[0].correction is None and lonely[0].loo_kv_pool is None


# --- pools -----------------------------------------------------------------------------------------


def test_resized_pools_follow_the_engine_arithmetic() -> None:
    block = KVPool(PoolUnit.BLOCK, 1000, 16, (KVGroup("full", 32),), 8192, 2 * MIB)
    assert resized_pool(block, 2000 * MIB, 1001 * MIB).capacity_units == 500
    assert resized_pool(block, 2000 * MIB, -5).capacity_units == 0
    byte = KVPool(PoolUnit.BYTE, 10 * GIB, 1, (KVGroup("full", 32),), 0, 1, (524_288,))
    assert resized_pool(byte, 10 * GIB, 6 * GIB).capacity_units == 6 * GIB


def test_a_correction_applied_to_an_estimate() -> None:
    deployment = DeploymentSpec(engine="plain", gpu_memory_bytes=80 * GIB, gpu_memory_utilization=1.0,
                                weights_bytes_per_gpu=20 * GIB, overhead_bytes_per_gpu=0, max_model_len=32768)  # fmt: skip
    est = estimate(LLAMA, deployment, context_tokens=4096)
    scope = ScopeKey("engine_profile", "plain", engine_profile="plain")
    minus_4 = Correction(scope, 3, non_torch_delta_bytes=4 * GIB)
    pool = calibrated_pool(est, minus_4)
    assert pool.capacity_units == 56 * GIB
    numbers = pool_numbers(pool, context=4096, max_model_len=32768, max_num_seqs=None, concurrencies=(1, 28, 29))
    # 56 GiB / 2 GiB per 4,096 tokens = 28 sequences; 56 GiB / 0.5 MiB = 114,688 tokens
    assert (numbers.b_max, numbers.kv_tokens) == (28, 114_688)
    assert numbers.max_context[28] == 4096 and numbers.max_context[1] == 32768
    assert numbers.max_context[29] < 4096
