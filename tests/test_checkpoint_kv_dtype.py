"""A checkpoint that declares its own KV cache format: `--kv-cache-dtype auto` runs as that format where the engine
release reads it (`EngineProfile.resolved_kv_dtype`), in the estimate and the grid alike.

Oracles: the engines' source, read in their wheels (vLLM resolves `auto` from a ModelOpt config's
`kv_cache_quant_algo` / `kv_cache_scheme` from 0.14.0, not in 0.13.0; SGLang from 0.5.3, not in 0.5.2:
`engine_constants.VLLM_KV_DTYPE_FROM_CHECKPOINT`, `sglang_constants.SGLANG_KV_DTYPE_FROM_CHECKPOINT_FROM`;
TensorRT-LLM's pyexecutor `validate_and_set_kv_cache_quant` returns on "auto", keeping the checkpoint's); vLLM
0.33's own resolution run as a library in tests/test_engine_oracle_kv_dtype.py; the bytes per token by hand."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pytest

from capacity.estimate import estimate
from capacity.grid import GridModel, GridOptions, build_capacity_grid
from capacity.hf_config import parse_config
from capacity.spec import DeploymentSpec, GpuSku, ModelSpec
from tests.conftest import ROOT
from tests.test_grid import _assert_rows_match, _stratified

H100 = GpuSku("h100-sxm-80gb", "H100", "nvidia", 85_520_809_984, fp8_support=True, architecture="hopper")
L4 = GpuSku("l4-24gb", "L4", "nvidia", 23_580_639_232, fp8_support=True, architecture="ada")
LLAMA_8B = ROOT / "models_registry" / "catalog" / "configs" / "meta-llama" / "Llama-3.1-8B-Instruct" / "config.json"
# Llama 3.1 8B: 32 layers x (K and V) x 8 KV heads x head dim 128, in bf16 and in fp8
BF16_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2
FP8_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 1
MODELOPT_FP8 = {"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head"]}


def modelopt_llama(**kv: Any) -> ModelSpec:
    """Llama 3.1 8B as a ModelOpt FP8 checkpoint whose quantization config adds `kv`."""
    config = json.loads(LLAMA_8B.read_text()) | {"quantization_config": MODELOPT_FP8 | kv}
    return parse_config(config, name="modelopt-llama-8b")


@pytest.mark.parametrize(
    ("kv", "declared"),
    [
        ({"kv_cache_quant_algo": "FP8"}, "fp8"),
        ({"kv_cache_quant_algo": "fp8"}, "fp8"),
        ({}, None),
        ({"kv_cache_quant_algo": None}, None),
        ({"kv_cache_quant_algo": "NVFP4"}, None),  # vLLM 0.20+'s nvfp4 cache: not sized, so not taken as fp8
        ({"kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"}}, "fp8"),
        ({"kv_cache_scheme": {"dynamic": True, "num_bits": 8, "type": "float"}}, None),
        ({"kv_cache_scheme": "not a scheme"}, None),  # another shape: the model's dtype, not a refusal
        ({"quantization": {"kv_cache_quant_algo": "FP8"}}, "fp8"),
    ],
)
def test_the_declared_kv_cache_is_read_from_a_modelopt_config(kv: dict[str, Any], declared: str | None) -> None:
    spec = modelopt_llama(**kv)
    assert spec.quantization is not None and spec.quantization.weight_format == "fp8"
    assert spec.quantization.kv_cache_format == declared


@pytest.mark.parametrize(
    ("engine", "version", "kv_dtype", "bytes_per_token", "runs_as"),
    [
        ("vllm", "0.13.0", "auto", BF16_BYTES_PER_TOKEN, "bfloat16"),
        ("vllm", "0.14.0", "auto", FP8_BYTES_PER_TOKEN, "fp8_e4m3"),
        ("vllm", None, "auto", FP8_BYTES_PER_TOKEN, "fp8_e4m3"),  # the newest release modelled
        ("vllm", None, "bfloat16", BF16_BYTES_PER_TOKEN, "bfloat16"),  # asked for: the checkpoint does not override
        ("sglang", "0.5.2", "auto", BF16_BYTES_PER_TOKEN, "bfloat16"),
        ("sglang", "0.5.3", "auto", FP8_BYTES_PER_TOKEN, "fp8_e4m3"),
        ("sglang", None, "auto", FP8_BYTES_PER_TOKEN, "fp8_e4m3"),
        # TensorRT-LLM's validate_and_set_kv_cache_quant leaves the checkpoint's kv_cache_quant_algo on "auto"
        ("trtllm", "1.0.0", "auto", FP8_BYTES_PER_TOKEN, "fp8_e4m3"),
        ("trtllm", None, "auto", FP8_BYTES_PER_TOKEN, "fp8_e4m3"),
        ("trtllm", None, "bfloat16", BF16_BYTES_PER_TOKEN, "bfloat16"),
    ],
)
def test_auto_runs_as_the_declared_kv_cache_from_the_release_that_reads_it(
    engine: str, version: str | None, kv_dtype: str, bytes_per_token: int, runs_as: str
) -> None:
    spec = modelopt_llama(kv_cache_quant_algo="FP8")
    deployment = DeploymentSpec(engine=engine, engine_version=version, kv_dtype=kv_dtype, max_model_len=8192)
    est = estimate(spec, deployment, gpu=H100, model_name="modelopt-llama-8b")
    assert est.kv_bytes_per_token == bytes_per_token
    assert est.kv_dtype == runs_as
    said = [note for note in est.notes if note.startswith("KV cache fp8_e4m3: the checkpoint declares")]
    assert bool(said) == (runs_as == "fp8_e4m3" and kv_dtype == "auto"), est.notes
    # a checkpoint that declares nothing runs `auto` as its dtype in every release
    plain = estimate(modelopt_llama(), deployment, gpu=H100, model_name="modelopt-llama-8b")
    assert plain.kv_bytes_per_token == (BF16_BYTES_PER_TOKEN if kv_dtype in ("auto", "bfloat16") else bytes_per_token)


def test_the_grid_runs_auto_as_the_declared_kv_cache_like_the_estimate() -> None:
    declared = GridModel("hand/modelopt-llama-8b-fp8-kv", modelopt_llama(kv_cache_quant_algo="FP8"))
    undeclared = GridModel("hand/modelopt-llama-8b", modelopt_llama())
    options = GridOptions(engines=("vllm", "sglang", "trtllm"), sglang_version="0.5.2", tp_sizes=(1, 2))
    grid = build_capacity_grid([declared, undeclared], [H100, L4], options).collect()
    auto = grid.filter(pl.col("kv_dtype") == "auto").group_by("model", "engine").agg(
        pl.col("kv_bytes_per_token").unique(), pl.col("kv_cache_dtype").unique()
    )
    got = {
        (r["model"], r["engine"]): (r["kv_bytes_per_token"], r["kv_cache_dtype"]) for r in auto.iter_rows(named=True)
    }
    assert got == {
        (declared.repo_id, "vllm"): ([FP8_BYTES_PER_TOKEN], ["fp8_e4m3"]),
        (declared.repo_id, "sglang"): ([BF16_BYTES_PER_TOKEN], ["bfloat16"]),  # 0.5.2 does not read it
        (undeclared.repo_id, "vllm"): ([BF16_BYTES_PER_TOKEN], ["bfloat16"]),
        (undeclared.repo_id, "sglang"): ([BF16_BYTES_PER_TOKEN], ["bfloat16"]),
        (declared.repo_id, "trtllm"): ([FP8_BYTES_PER_TOKEN], ["fp8_e4m3"]),
        (undeclared.repo_id, "trtllm"): ([BF16_BYTES_PER_TOKEN], ["bfloat16"]),
    }
    by_model = {m.repo_id: m for m in (declared, undeclared)}
    _assert_rows_match(grid, _stratified(grid, 12, seed=3), by_model, {g.id: g for g in (H100, L4)})


def test_a_benchmark_of_the_16_bit_original_is_not_sized_as_its_quantized_proxy() -> None:
    """The reference set's Gemma 4 31B runs used the BF16 checkpoint, and the catalog holds it only as NVIDIA's NVFP4
    repackaging (FP8 KV declared): scored as the architecture alone, neither the proxy's weights nor its KV cache;
    a proxy the run states it served as published (MiniMax-M2.5's FP8) keeps its format."""
    from evaluation.perf_cv import _catalog_resolver, run_checkpoint
    from evaluation.perf_measurements import load_perf_measurements

    resolve, _find_gpu = _catalog_resolver()
    rows = {row.id: row for row in load_perf_measurements().rows}
    gemma = rows["sglcookbook-gemma4-gemma-4-31b-it-h200-sxm-141gb-tp2-c1-random-default"]
    proxy, _checkpoint = resolve(gemma.config_model)
    assert proxy.quantization is not None and proxy.quantization.kv_cache_format == "fp8"
    assert run_checkpoint(gemma, proxy).quantization is None
    minimax = next(r for r in rows.values() if r.model == "MiniMaxAI/MiniMax-M2.5")
    spec, _checkpoint = resolve(minimax.config_model)
    assert run_checkpoint(minimax, spec) is spec
