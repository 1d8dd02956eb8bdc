"""Layouts the engines refuse before sizing memory are reported as "does not start" with the engine's
message, never FITS. Oracles: the engines' own source, read in the wheels (quoted per case below):
- vLLM `config/vllm.py` `_get_quantization_config` raises when `capability < quant_config.get_min_capability()`;
  `Fp8Config.get_min_capability()` is 80 in 0.6.1-0.13.0 and 75 from 0.14.0 (FP8 Marlin on Turing) to 0.33.0;
- SGLang 0.5.23 `Fp8Config.get_min_capability()` is 80 (loader.py raises the same sentence);
- vLLM `config/model.py` `_get_and_verify_max_len`: a max_model_len above the derived one raises unless
  VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; SGLang `_derive_context_length` likewise with
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.
The compute capabilities are NVIDIA's (V100 7.0, T4 7.5, A100 8.0, L4 8.9, H100 9.0)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from capacity.engines.command_line import read_command
from capacity.estimate import estimate
from capacity.hf_config import parse_config
from capacity.spec import CheckpointQuant, DeploymentSpec, GpuSku, ModelSpec
from tests.test_registry_hostile import GOOD, _bundled_config

LLAMA_8B = _bundled_config(GOOD)
LIMIT_TOKENS = 131072  # Llama 3.1's max_position_embeddings (rope_type llama3: vLLM applies no factor)


def _gpu(architecture: str, vendor: str = "nvidia") -> GpuSku:
    return GpuSku(
        id=f"test-{architecture}",
        name=architecture,
        vendor=vendor,
        memory_total_bytes=80 * 2**30,
        architecture=architecture,
    )


def _model() -> ModelSpec:
    return parse_config(LLAMA_8B, name="meta-llama/Llama-3.1-8B-Instruct")


@pytest.mark.parametrize(
    ("engine", "version", "architecture", "capability", "minimum"),
    [
        ("vllm", "0.33", "volta", 70, 75),  # 0.33: 75, V100 below it
        ("vllm", "0.14.0", "volta", 70, 75),
        ("vllm", "0.13.0", "turing", 75, 80),  # 0.13: still 80, so T4 is refused
        ("vllm", "0.6.1", "turing", 75, 80),
        ("sglang", None, "turing", 75, 80),
        ("sglang", None, "volta", 70, 80),
    ],
)
def test_fp8_weights_below_the_minimum_capability_do_not_start(
    engine: str, version: str | None, architecture: str, capability: int, minimum: int
) -> None:
    got = estimate(
        _model(),
        DeploymentSpec(engine=engine, engine_version=version, weight_dtype="fp8", tp=2, max_model_len=8192),
        gpu=_gpu(architecture),
    )
    assert not got.starts and not got.fits and got.b_max == 0
    assert got.max_model_len_that_starts == 0  # no length starts: the refusal is the GPU's
    assert got.reason == (
        f"DOES NOT START: {engine} refuses it: The quantization method fp8 is not supported for the current GPU. "
        f"Minimum capability: {minimum}. Current capability: {capability}."
    )


@pytest.mark.parametrize(
    ("engine", "version", "architecture"),
    [
        ("vllm", "0.33", "turing"),  # FP8 Marlin, weight-only, from 0.14: the engine runs it, so no refusal
        ("vllm", "0.14.0", "turing"),
        ("vllm", "0.13.0", "ampere"),
        ("vllm", "0.5.0", "volta"),  # 0.4.1-0.5.x not read: estimated, not refused
        ("sglang", None, "ampere"),
        ("trtllm", None, "volta"),  # TensorRT-LLM's checks are not read: not refused
        ("vllm", "0.33", "cdna3"),  # not NVIDIA: no compute capability to check
    ],
)
def test_fp8_weights_the_engine_runs_are_not_refused(engine: str, version: str | None, architecture: str) -> None:
    vendor = "amd" if architecture.startswith("cdna") else "nvidia"
    got = estimate(
        _model(),
        DeploymentSpec(engine=engine, engine_version=version, weight_dtype="fp8", max_model_len=8192),
        gpu=_gpu(architecture, vendor),
    )
    assert got.starts and got.fits, got.reason


@pytest.mark.parametrize(
    ("version", "architecture", "kv_dtype", "refused"),
    [
        ("0.33", "turing", "fp8", True),  # Triton attention (FlashInfer's floor is 8.0 from 0.24) raises below 8.9
        ("0.24", "volta", "fp8_e5m2", True),
        ("0.33", "ampere", "fp8", False),  # FlashInfer takes fp8 on 8.0-8.8
        ("0.33", "ada", "fp8_e4m3", False),
        ("0.23", "turing", "fp8", False),  # 0.13-0.23: FlashInfer from 7.5, no Triton check
        ("0.33", "turing", "auto", False),
    ],
)
def test_fp8_kv_cache_on_pre_ampere_gpus(version: str, architecture: str, kv_dtype: str, refused: bool) -> None:
    """vLLM's `TritonAttentionImpl.__init__` (0.24-0.33): "FP8 KV cache is not supported by the Triton attention
    backend on {device} (compute capability {x.y}); native FP8 (fp8e4nv) requires SM89+. Re-run with
    --kv-cache-dtype float16." (float16 below 8.0)."""
    got = estimate(
        _model(),
        DeploymentSpec(engine_version=version, kv_dtype=kv_dtype, max_model_len=8192),
        gpu=_gpu(architecture),
    )
    capability = {"volta": "7.0", "turing": "7.5"}.get(architecture)
    expected = (
        f"DOES NOT START: vllm refuses it: FP8 KV cache is not supported by the Triton attention backend on "
        f"{architecture} (compute capability {capability}); native FP8 (fp8e4nv) requires SM89+. "
        "Re-run with --kv-cache-dtype float16."
    )
    assert (got.reason == expected) is refused and got.starts is not refused, got.reason


def test_fp8_kv_cache_of_an_mla_model_is_not_refused() -> None:
    """MLA models take the MLA backends (TRITON_MLA on these GPUs), whose fp8 rule is not read: estimated."""
    from tests.handmade import mla_spec

    got = estimate(mla_spec(), DeploymentSpec(kv_dtype="fp8", max_model_len=4096), gpu=_gpu("turing"))
    assert "refuses" not in got.reason


def test_bf16_on_volta_is_not_refused() -> None:
    got = estimate(_model(), DeploymentSpec(max_model_len=8192), gpu=_gpu("volta"))
    assert got.starts and "refuses" not in got.reason


@pytest.mark.parametrize(
    ("engine", "what", "override"),
    [
        ("vllm", "max_model_len", "VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
        ("sglang", "context_length", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"),
    ],
)
def test_a_length_beyond_the_model_limit_does_not_start_without_the_override(
    engine: str, what: str, override: str
) -> None:
    asked = 300000
    refused = estimate(_model(), DeploymentSpec(engine=engine, max_model_len=asked), gpu=_gpu("hopper"))
    assert not refused.starts and not refused.fits and refused.b_max == 0
    assert refused.reason.startswith(
        f"DOES NOT START: {engine} refuses it: User-specified {what} ({asked}) is greater than the derived "
        f"{what} ({LIMIT_TOKENS})"
    )
    assert f"set the env var {override}=1" in refused.reason and "\n" not in refused.reason
    # at the model's own limit it would start if the pool holds it (the pool's answer, not the refusal's)
    assert 0 < refused.max_model_len_that_starts <= LIMIT_TOKENS

    allowed = estimate(
        _model(),
        DeploymentSpec(engine=engine, max_model_len=asked, allow_long_max_model_len=True),
        gpu=_gpu("hopper"),
    )
    assert "refuses" not in allowed.reason
    at_limit = estimate(_model(), DeploymentSpec(engine=engine, max_model_len=LIMIT_TOKENS), gpu=_gpu("hopper"))
    assert "refuses" not in at_limit.reason


def test_vllm_0_4_has_no_long_length_override() -> None:
    """0.4.0.post1's `_get_and_verify_max_len` raises with no environment variable to set."""
    got = estimate(
        _model(),
        DeploymentSpec(engine_version="0.4", max_model_len=300000, allow_long_max_model_len=True),
        gpu=_gpu("hopper"),
    )
    assert "refuses it: User-specified max_model_len (300000)" in got.reason


@pytest.mark.parametrize(
    ("prefix", "allowed"),
    [
        ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 ", True),
        ("env VLLM_ALLOW_LONG_MAX_MODEL_LEN=true ", True),
        ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 ", True),
        ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=0 ", False),
        ("HF_TOKEN=x ", False),
        ("docker run --gpus all -e VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm/vllm-openai:v0.11.0 --model ", True),
        ("docker run --env=VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm/vllm-openai:latest --model ", True),
        ("docker run -e HF_TOKEN=x vllm/vllm-openai:latest --model ", False),
        ("", False),
    ],
)
def test_a_pasted_command_sets_the_override_from_its_environment(prefix: str, allowed: bool) -> None:
    launcher = "" if prefix.startswith("docker") else "vllm serve "
    command = read_command(prefix + launcher + "meta-llama/Llama-3.1-8B-Instruct --max-model-len 300000")
    assert command.options.get("allow_long_max_model_len", False) is allowed


@pytest.mark.parametrize("vllm_version", ["0.13", "0.33"])
def test_the_grid_publishes_no_layout_the_engine_refuses(vllm_version: str) -> None:
    """The grid runs each model at its own limit (never beyond it) and plans fp8 weights only on GPUs with
    `fp8_support` (Ada and later), a subset of what the engines run: no published row is one the start
    check above refuses, and fp8 rows exist where the engines run them (the check can fail)."""
    from capacity.engines.protocol import StartRequest
    from capacity.engines.registry import engine_profile
    from capacity.grid import GridModel, GridOptions, build_capacity_grid
    from models_registry.sources.gpu_catalog import load_gpu_skus
    from tests.handmade import dense_spec

    catalog = Path(__file__).resolve().parent.parent / "models_registry" / "catalog" / "gpus.yaml"
    skus = [g for g in load_gpu_skus(catalog) if g.id in ("t4-16gb", "v100-sxm2-32gb", "h100-sxm-80gb")]
    assert {g.architecture for g in skus} == {"turing", "volta", "hopper"}
    small = dense_spec(layers=16, heads=16, kv_heads=8, hidden=2048, intermediate=8192, context=32768)
    fp8 = replace(small, quantization=CheckpointQuant("fp8", "fp8"))
    models = [GridModel("hand/small", small), GridModel("hand/small-fp8", fp8)]
    options = GridOptions(engines=("vllm", "sglang"), vllm_version=vllm_version, tp_sizes=(1, 2), pp_sizes=(2,))
    grid = build_capacity_grid(models, skus, options).collect()
    by_id, specs = {g.id: g for g in skus}, {m.repo_id: m.spec for m in models}
    fp8_gpus = set()
    columns = ("model", "gpu", "engine", "engine_version", "weight_dtype", "kv_dtype", "max_model_len")
    for row in grid.select(*columns).unique().iter_rows(named=True):
        profile = engine_profile(row["engine"], row["engine_version"])
        spec, gpu = specs[row["model"]], by_id[row["gpu"]]
        request = StartRequest(spec, gpu, row["weight_dtype"], row["max_model_len"], kv_dtype=row["kv_dtype"])
        assert profile.start_refusal(request) is None, row
        if row["weight_dtype"] == "fp8" or row["kv_dtype"].startswith("fp8"):
            fp8_gpus.add(row["gpu"])
    assert fp8_gpus == {"h100-sxm-80gb"}


CLI_LLAMA = Path(__file__).parent / "fixtures" / "broken_configs" / "valid-llama" / "config.json"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu", "v100-sxm2-32gb", "--dtype", "fp8", "--tp", "2"], "Minimum capability: 75. Current capability: 70."),
        (["--gpu", "t4-16gb", "--dtype", "fp8", "--tp", "2", "--engine-version", "0.13"], "Minimum capability: 80."),
        (["--gpu", "H100", "--max-model-len", "300000"], "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
    ],
)
def test_the_issue_examples_do_not_say_fits(args: list[str], words: str) -> None:
    """`capplan estimate` as the issue ran it: the last line is the engine's refusal, not FITS."""
    from typer.testing import CliRunner

    from pipelines.cli import app

    result = CliRunner().invoke(app, ["estimate", str(CLI_LLAMA), *args])
    assert "Traceback" not in result.output
    verdict = [line for line in result.stdout.splitlines() if line.startswith(("FITS", "DOES NOT"))]
    assert len(verdict) == 1 and verdict[0].startswith("DOES NOT START: vllm refuses it: ") and words in verdict[0]
    contract = CliRunner().invoke(app, ["estimate", str(CLI_LLAMA), *args, "--json"])
    got = json.loads(contract.stdout)
    assert got["starts"] is False and got["fits"] is False and words in got["reason"]


@pytest.mark.parametrize(
    ("vllm_version", "fp8_weights_run", "fp8_kv_runs"), [("0.13", False, True), ("0.33", True, False)]
)
def test_the_grid_asks_the_same_start_check(vllm_version: str, fp8_weights_run: bool, fp8_kv_runs: bool) -> None:
    """A user catalog that claims fp8 on a Turing card (`fp8_support: true`) lets the grid plan fp8 there; the
    engine's start check then decides, as in `estimate`: fp8 KV starts on 0.13 (FlashInfer from 7.5), not on
    0.33 (Triton attention); fp8 weights start from vLLM 0.14 (FP8 Marlin), not on 0.13."""
    from capacity.grid import GridModel, GridOptions, build_capacity_grid
    from tests.handmade import dense_spec

    turing = replace(_gpu("turing"), id="test-turing-fp8", fp8_support=True, memory_total_bytes=16 * 2**30)
    small = dense_spec(layers=16, heads=16, kv_heads=8, hidden=2048, intermediate=8192, context=32768)
    options = GridOptions(engines=("vllm",), vllm_version=vllm_version, tp_sizes=(1,), weight_dtypes=("bf16", "fp8"))
    grid = build_capacity_grid([GridModel("hand/small", small)], [turing], options).collect()
    assert grid.height > 0
    assert bool(grid.filter(pl.col("kv_dtype").cast(pl.String).str.starts_with("fp8")).height) is fp8_kv_runs
    assert bool(grid.filter(pl.col("weight_dtype").cast(pl.String) == "fp8").height) is fp8_weights_run
    for kv_dtype, weight_dtype, starts in (("fp8", "bf16", fp8_kv_runs), ("auto", "fp8", fp8_weights_run)):
        got = estimate(
            small,
            DeploymentSpec(engine_version=vllm_version, kv_dtype=kv_dtype, weight_dtype=weight_dtype),
            gpu=turing,
        )
        assert got.starts is starts and ("refuses it" in got.reason) is not starts, got.reason


@pytest.mark.parametrize(
    ("engine", "version"), [("vllm", "0.13"), ("vllm", "0.33"), ("vllm", "0.6.1"), ("sglang", None), ("trtllm", None)]
)
def test_gpus_of_one_start_check_kind_start_alike(engine: str, version: str | None) -> None:
    """The grid asks the start check once per `start_check_kind` of GPU: on every catalog GPU, for fp8 and bf16
    weights, fp8 and auto KV, within and beyond the limit, the decision is the one of the kind's first GPU."""
    from capacity.engines.protocol import StartRequest
    from capacity.engines.registry import engine_profile
    from models_registry.sources.gpu_catalog import load_gpu_skus

    catalog = Path(__file__).resolve().parent.parent / "models_registry" / "catalog" / "gpus.yaml"
    profile = engine_profile(engine, version)
    first: dict[object, GpuSku] = {}
    spec = _model()
    for gpu in [*load_gpu_skus(catalog), _gpu("turing"), _gpu("cdna3", vendor="amd")]:
        kind = profile.start_check_kind(gpu)
        representative = first.setdefault(kind, gpu)
        for weight_format, kv_dtype, length in (
            ("fp8", "auto", 8192), ("bf16", "fp8", 8192), ("bf16", "auto", LIMIT_TOKENS + 1), ("bf16", "auto", 8192)
        ):  # fmt: skip
            decided = [
                profile.start_refusal(StartRequest(spec, g, weight_format, length, kv_dtype=kv_dtype)) is None
                for g in (gpu, representative)
            ]
            assert decided[0] == decided[1], (gpu.id, representative.id, weight_format, kv_dtype, length)
    assert len(first) > 1  # the kinds do split the fleet


def _wna16_moe(group_size: int | None, zero_points: bool, moe_intermediate: int = 768) -> ModelSpec:
    """Qwen3-30B-A3B's shape (hidden 2,048, 128 experts of intermediate `moe_intermediate`), compressed-tensors INT4."""
    config = json.loads((Path(__file__).parent / "configs" / "qwen3_moe-qwen3-30b-a3b.json").read_text())
    config["moe_intermediate_size"] = moe_intermediate
    spec = parse_config(config)
    quant = CheckpointQuant("compressed-tensors", "int4", group_size, group_zero_points=zero_points)
    return replace(spec, quantization=quant)


@pytest.mark.parametrize(
    ("version", "tp", "dp", "ep", "refused"),
    [
        ("0.33", 8, 1, 1, "intermediate size per tensor-parallel partition (96)"),  # 768 / 8
        ("0.33", 4, 1, 1, "partition (192)"),  # 1.5 groups of 128
        ("0.33", 2, 1, 1, None),  # 384 = 3 groups
        ("0.33", 4, 2, 1, "partition (96)"),  # DP without EP: the experts split over the 8 ranks (tp x dp)
        ("0.33", 4, 2, 8, None),  # expert parallel: whole experts, the intermediate unsplit (768)
        ("0.24", 8, 1, 1, "partition (96)"),
        ("0.23", 8, 1, 1, None),  # no check before 0.24.0
    ],
)
def test_wna16_experts_whose_scale_groups_a_shard_cuts_do_not_start(
    version: str, tp: int, dp: int, ep: int, refused: str | None
) -> None:
    """vLLM `CompressedTensorsWNA16MoEMethod.create_weights` (0.24.0-0.34.0 wheels; 0.33's words): the experts'
    intermediate per partition must be a multiple of the group (group 128 here: 768 / 4 = 192 is not, 768 / 2 = 384
    is), on any GPU. The weights-oracle test holds the message to vLLM 0.33's own code."""
    model = _wna16_moe(128, zero_points=False)
    deployment = DeploymentSpec(engine="vllm", engine_version=version, tp=tp, dp=dp, ep=ep)
    est = estimate(model, deployment, gpu=_gpu("hopper"))
    if refused is None:
        assert "WNA16" not in (est.reason or ""), est.reason
    else:
        assert not est.starts and est.reason.startswith("DOES NOT START: vllm refuses it: CompressedTensors WNA16 MoE")
        assert refused in est.reason and est.max_model_len_that_starts == 0


@pytest.mark.parametrize(("version", "refused"), [("0.28", False), ("0.29", True), ("0.33", True)])
def test_asymmetric_wna16_zero_points_must_not_straddle_a_word(version: str, refused: bool) -> None:
    """From 0.29.0 (not in 0.28.0) an asymmetric checkpoint's packed zero points: 2 x the intermediate per rank
    must be a multiple of 8 (INT4 values an int32): 772 / 4 = 193, 386 is not; channel strategy, no group check."""
    model = _wna16_moe(None, zero_points=True, moe_intermediate=772)
    est = estimate(model, DeploymentSpec(engine="vllm", engine_version=version, tp=4), gpu=_gpu("hopper"))
    assert ("= 386) must be divisible by packed_factor (8)" in (est.reason or "")) is refused


def test_the_grid_plans_no_wna16_layout_vllm_refuses() -> None:
    """The grid skips the layouts whose weights vLLM refuses to create, whatever the GPU, and keeps the others."""
    from capacity.grid import GridModel, GridOptions, build_capacity_grid

    model = GridModel("hand/qwen3-30b-a3b-int4-g128", _wna16_moe(128, zero_points=False))
    options = GridOptions(engines=("vllm",), vllm_version="0.33", tp_sizes=(1, 2, 4, 8), kv_dtypes=("auto",),
                          weight_dtypes=("auto",))  # fmt: skip
    gpu = replace(_gpu("hopper"), gpus_per_node=8)
    grid = build_capacity_grid([model], [gpu], options).collect()
    tps = set(grid.filter(pl.col("dp") == 1).get_column("tp").unique())
    assert tps == {1, 2}  # 768 / 4 = 192 and 768 / 8 = 96 cut a group of 128
