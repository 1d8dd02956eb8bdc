"""`benchmarks/aiconfigurator_peer.py`: a measured row in AIConfigurator's names, and the scoring.

The translation is checked against AIConfigurator 0.12's own vocabulary (its `cli estimate` flags and
the system names its help text lists: `h100_sxm`, `b200_sxm`, ...; its GEMM / KV quant mode names
`fp8`, `int4_wo`, `bfloat16`) and the row's own fields; the statistics against hand arithmetic. The
one test that runs the peer itself needs `.venv-aiconfigurator` (tools/aiconfigurator/setup_venv.sh,
850 MB from PyPI): it is a comparison with another tool, not a capplan feature, so it is skipped where
that venv is absent, and it is `slow` (the peer loads its kernel tables for seconds).
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache

import pytest

from benchmarks.aiconfigurator_peer import (
    AicMode,
    AicRequest,
    Paired,
    aic_request,
    aic_value,
    config_dir_of,
    error_stats,
    run_aiconfigurator,
    table,
)
from benchmarks.peer import ROOT, default_venv
from capacity.spec import ModelSpec
from evaluation.perf_measurements import PerfMeasurement
from models_registry.resolve import spec_and_checkpoint

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN_MOE = "Qwen/Qwen3-30B-A3B"


@cache
def spec(repo_id: str) -> ModelSpec:
    return spec_and_checkpoint(repo_id)[0]


def row(**fields: object) -> PerfMeasurement:
    base: dict[str, object] = dict(
        id="r1",
        source="https://example.invalid/bench",
        source_group="g",
        engine="vllm",
        benchmark_kind="serving",
        model=LLAMA_8B,
        gpu="h100-sxm-80gb",
        tp=1,
        pp=1,
        num_gpus=1,
    )
    base.update(fields)
    return PerfMeasurement(**base)  # type: ignore[arg-type]


def ask(measured: PerfMeasurement) -> AicRequest | str:
    folder = config_dir_of(measured.config_model)
    assert folder is not None and (folder / "config.json").is_file()
    return aic_request(measured, spec(measured.config_model), folder)


def test_a_capped_concurrency_row_is_an_agg_estimate_at_that_batch_with_its_mean_lengths() -> None:
    # 500 prompts, 500,000 input and 100,000 output tokens: means 1000 and 200 (sharegpt-style totals)
    got = ask(row(concurrency=16, num_prompts=500, total_input_tokens=500_000, total_output_tokens=100_000))
    assert isinstance(got, AicRequest)
    assert (got.mode, got.batch_size, got.isl, got.osl) == (AicMode.AGG, 16, 1000, 200)
    assert (got.system_name, got.backend_name, got.tp_size, got.pp_size) == ("h100_sxm", "vllm", 1, 1)
    # a bf16 checkpoint, nothing stated: its weights are AIConfigurator's reading of the config; the KV
    # cache is the engine default (16-bit), as capplan sizes it
    assert (got.gemm_quant_mode, got.moe_quant_mode, got.kvcache_quant_mode) == (None, None, "bfloat16")
    assert got.model_path.endswith("configs/meta-llama/Llama-3.1-8B-Instruct")


def test_stated_fp8_weights_and_kv_on_a_16_bit_checkpoint_are_passed_as_quant_modes() -> None:
    got = ask(row(concurrency=4, input_len=128, output_len=64, weight_dtype="FP8", kv_cache_dtype="fp8"))
    assert isinstance(got, AicRequest)
    assert (got.gemm_quant_mode, got.kvcache_quant_mode) == ("fp8", "fp8")


def test_moe_experts_split_over_tp_unless_the_row_states_expert_parallelism() -> None:
    plain = ask(row(model=QWEN_MOE, tp=4, num_gpus=4, concurrency=8, input_len=1000, output_len=100))
    expert = ask(row(model=QWEN_MOE, tp=4, ep=4, num_gpus=4, concurrency=8, input_len=1000, output_len=100))
    int4 = ask(
        row(model=QWEN_MOE, tp=2, num_gpus=2, concurrency=8, input_len=1000, output_len=100, weight_dtype="INT4")
    )
    assert isinstance(plain, AicRequest) and isinstance(expert, AicRequest) and isinstance(int4, AicRequest)
    assert (plain.moe_tp_size, plain.moe_ep_size) == (4, 1)
    assert (expert.moe_tp_size, expert.moe_ep_size) == (1, 4)
    assert (int4.gemm_quant_mode, int4.moe_quant_mode) == ("int4_wo", "int4_wo")


def test_a_static_batch_is_a_static_estimate_of_that_batch() -> None:
    got = ask(row(engine="trtllm", benchmark_kind="static_batch", batch_size=64, input_len=128, output_len=2048))
    assert isinstance(got, AicRequest)
    assert (got.mode, got.batch_size, got.isl, got.osl, got.backend_name) == (AicMode.STATIC, 64, 128, 2048, "trtllm")


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (dict(request_rate=math.inf, num_prompts=1000, input_len=100, output_len=100), "all at once"),
        (dict(request_rate=4.0, num_prompts=1000, input_len=100, output_len=100), "finite rate"),
        (dict(gpu="mi300x-192gb", concurrency=8, input_len=100, output_len=100), "no AIConfigurator system"),
        (dict(gpu="a100-sxm-40gb", concurrency=8, input_len=100, output_len=100), "no AIConfigurator system"),
        (dict(concurrency=8, dp_attention=4, input_len=100, output_len=100), "attention data parallelism"),
        (dict(concurrency=8), "no input / output length"),
    ],
)
def test_rows_it_cannot_be_asked_say_why(fields: dict[str, object], reason: str) -> None:
    got = ask(row(**fields))
    assert isinstance(got, str) and reason in got


def test_answers_come_back_in_capplans_units_and_a_refusal_is_nan() -> None:
    answer = {"ttft_ms": 250.0, "tpot_ms": 12.5, "output_tokens_per_s": 900.0}
    assert (aic_value(answer, "ttft"), aic_value(answer, "tpot"), aic_value(answer, "output_throughput")) == (
        0.25,
        0.0125,
        900.0,
    )
    assert math.isnan(aic_value({"refused": "ValueError: no data"}, "tpot"))


def test_error_statistics_by_hand() -> None:
    # errors +10 %, -20 %, 0 %, +50 %: |error| sorted 0, 10, 20, 50 -> median 15; the 90th percentile
    # (linear, numpy's default) at 0.9 * 3 = 2.7 -> 20 + 0.7 * 30 = 41; signed sorted -20, 0, 10, 50 -> 5
    stats = error_stats([100.0] * 4, [110.0, 80.0, 100.0, 150.0])
    assert stats.n == 4
    assert stats.median_abs_pct == pytest.approx(15.0)
    assert stats.p90_abs_pct == pytest.approx(41.0)
    assert stats.signed_median_pct == pytest.approx(5.0)


def test_the_table_counts_only_rows_all_three_answer_and_who_is_closer() -> None:
    pairs = [
        Paired("a", "vllm", "tpot", 0.010, steady=0.011, simulated=0.012, reported=0.012, aiconfigurator=0.0105),
        Paired("b", "sglang", "tpot", 0.010, steady=0.020, simulated=0.0101, reported=0.0101, aiconfigurator=0.013),
        Paired("c", "vllm", "tpot", 0.010, steady=0.011, simulated=0.011, reported=0.011, aiconfigurator=math.nan),
    ]
    got = table(pairs)
    cell = got["all/tpot"]
    assert cell["steady"]["n"] == 2  # row c: AIConfigurator refused it
    # a: sim 20 % vs AIC 5 % (AIC closer); b: sim 1 % vs AIC 30 % (sim closer); steady 10 % / 100 % vs 5 % / 30 %
    assert (cell["simulated_closer"], cell["aiconfigurator_closer_than_simulated"]) == (1, 1)
    assert (cell["reported_closer"], cell["aiconfigurator_closer_than_reported"]) == (1, 1)
    assert (cell["steady_closer"], cell["aiconfigurator_closer_than_steady"]) == (0, 2)
    assert got["vllm/tpot"]["aiconfigurator"]["n"] == 1 and "vllm/ttft" not in got


VENV = default_venv(ROOT, ".venv-aiconfigurator", "AICONFIGURATOR_VENV")


@pytest.mark.slow
@pytest.mark.skipif(
    not (VENV / "bin" / "python").exists(), reason="no .venv-aiconfigurator (tools/aiconfigurator/setup_venv.sh)"
)
def test_the_peer_answers_offline_within_the_bandwidth_bound_and_refuses_with_reasons() -> None:
    llama = ask(row(concurrency=8, input_len=1000, output_len=200))
    mistral = ask(row(id="r2", model="mistralai/Mistral-7B-v0.1", concurrency=8, input_len=1000, output_len=200))
    assert isinstance(llama, AicRequest) and isinstance(mistral, AicRequest)
    # a hub id, not a local folder: offline (lookups and sockets refused) it must be refused, not downloaded
    hub = dataclasses.replace(llama, id="hub", model_path="meta-llama/Llama-3.1-8B-Instruct")
    report = run_aiconfigurator([llama, mistral, hub], VENV)
    answers = {a["id"]: a for a in report["answers"]}
    assert report["aiconfigurator"] == "0.12.0"
    got = answers["r1"]
    # Llama-3.1-8B: 8.03e9 parameters x 2 bytes = 16.06 GB read per decode step; H100 SXM: 3.35 TB/s (NVIDIA's
    # datasheet) -> no step under 4.79 ms; 8 requests in flight make at most 8 tokens per step
    assert got["tpot_ms"] > 16.06e9 / 3.35e12 * 1e3
    assert got["output_tokens_per_s"] <= 8 / (got["tpot_ms"] / 1e3) * 1.001
    assert 0 < got["ttft_ms"] < 10_000
    # MistralForCausalLM is not among its supported architectures (its error says so)
    assert "not supported" in answers["r2"]["refused"]
    # it reaches for huggingface.co itself (urllib, whatever HF_HUB_OFFLINE says): the runner's guard refuses it
    assert "network disabled by the peer runner" in answers["hub"]["refused"]
