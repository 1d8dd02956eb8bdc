"""Measured speed from telemetry: token counters, latency histograms, hostile histograms, and the
prediction next to them. Every expected number is derived by hand in the comments."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from telemetry.speed import histogram_quantile
from telemetry.summary import deployment_summary
from tests.test_telemetry_support import ingest, rejects

INF = math.inf
LLAMA = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'


def test_histogram_quantile_by_hand() -> None:
    # cumulative: 10 obs <= 0.1, 20 more in (0.1, 0.2], 10 more in (0.2, 0.5], none above
    buckets = [(0.1, 10.0), (0.2, 30.0), (0.5, 40.0), (INF, 40.0)]
    # q=0.5: rank 20 falls in (0.1, 0.2] holding 20, 10 of them below rank: 0.1 + 0.1 x 10/20
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.15, rel=1e-12)
    # q=0.9: rank 36 in (0.2, 0.5] holding 10, 6 in: 0.2 + 0.3 x 0.6
    assert histogram_quantile(0.9, buckets) == pytest.approx(0.38, rel=1e-12)
    # q=1: rank 40 reached first at le=0.5 (not +Inf)
    assert histogram_quantile(1.0, buckets) == 0.5
    # lowest bucket starts at 0: rank 2.5 of 10 in (0, 0.1]
    assert histogram_quantile(0.0625, buckets) == pytest.approx(0.025, rel=1e-12)
    # the rank in the +Inf bucket: the highest finite bound
    assert histogram_quantile(0.99, [(0.1, 10.0), (0.2, 30.0), (INF, 40.0)]) == 0.2
    # Prometheus' NaN cases: no +Inf bucket, one bucket, no observations
    assert histogram_quantile(0.5, [(0.1, 5.0), (0.2, 7.0)]) is None
    assert histogram_quantile(0.5, [(INF, 7.0)]) is None
    assert histogram_quantile(0.5, [(0.1, 0.0), (INF, 0.0)]) is None
    assert histogram_quantile(-0.1, buckets) == -INF and histogram_quantile(1.1, buckets) == INF


def _hist(name: str, labels: str, buckets: dict[str, float], total_sum: float) -> list[str]:
    lines = [f'{name}_bucket{{{labels},le="{le}"}} {count}' for le, count in buckets.items()]
    lines.append(f"{name}_sum{{{labels}}} {total_sum}")
    lines.append(f"{name}_count{{{labels}}} {buckets['+Inf']}")
    return lines


def _scrape(
    at: str,
    counters: tuple[float, float, float],
    itl: tuple[dict[str, float], float],
    ttft: tuple[dict[str, float], float],
) -> list[str]:
    """One vLLM 0.33 scrape of LLAMA: (running requests, generated and prompt token counters), then the
    inter-token latency and time-to-first-token histograms as (buckets, sum)."""
    running, generated, prompt = counters
    return [
        f"# scraped_at: {at}",
        f"vllm:num_requests_running{{{LLAMA}}} {running}",
        f"vllm:generation_tokens_total{{{LLAMA}}} {generated}",
        f"vllm:prompt_tokens_total{{{LLAMA}}} {prompt}",
        *_hist("vllm:inter_token_latency_seconds", LLAMA, *itl),
        *_hist("vllm:time_to_first_token_seconds", LLAMA, *ttft),
    ]


def _two_scrapes() -> str:
    """vLLM 0.33 names, scrapes 600 s apart."""
    first = _scrape(
        "2025-06-02T12:00:00Z",
        (30.0, 1000000.0, 5000000.0),
        ({"0.01": 100, "0.025": 50000, "0.05": 90000, "+Inf": 100000}, 2500.0),
        ({"0.1": 1000, "0.5": 8000, "1.0": 9900, "+Inf": 10000}, 3000.0),
    )
    second = _scrape(
        "2025-06-02T12:10:00Z",
        (50.0, 1600000.0, 5800000.0),
        ({"0.01": 100, "0.025": 350000, "0.05": 690000, "+Inf": 700000}, 20500.0),
        ({"0.1": 1100, "0.5": 8300, "1.0": 10300, "+Inf": 10400}, 3120.0),
    )
    return "\n".join(first + second) + "\n"


def test_speed_from_two_scrapes(tmp_path: Path) -> None:
    result = ingest(tmp_path, {"dep/metrics.prom": _two_scrapes()})
    assert result.rejects.is_empty()
    assert result.files.row(0, named=True)["accepted"] == 2 * (3 + 6 + 6)
    got = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().row(0, named=True)
    # 600,000 generated tokens in 600 s
    assert got["measured_output_tokens_per_second"] == pytest.approx(1000.0, rel=1e-12)
    assert got["measured_throughput_source"] == "generation_tokens_total"
    assert got["speed_window_s"] == 600.0
    # 400 first tokens (TTFT _count 10,000 -> 10,400): 800,000 / 400 prompt, 600,000 / 400 output tokens
    assert got["requests_in_window"] == 400.0
    assert (got["observed_input_tokens"], got["observed_output_tokens"]) == (2000.0, 1500.0)
    assert got["observed_concurrency"] == 40.0  # (30 + 50) / 2, one engine
    # ITL increases: le 0.01: 0, 0.025: 300,000, 0.05: 600,000, +Inf: 600,000; sum 18,000 s
    assert got["measured_tpot_mean_ms"] == pytest.approx(30.0, rel=1e-12)  # 18,000 / 600,000 s
    assert got["measured_tpot_p50_ms"] == pytest.approx(25.0, rel=1e-12)  # rank 300,000: top of (0.01, 0.025]
    assert got["measured_tpot_p90_ms"] == pytest.approx(45.0, rel=1e-12)  # 0.025 + 0.025 x 240k/300k
    assert got["measured_tpot_p99_ms"] == pytest.approx(49.5, rel=1e-12)  # 0.025 + 0.025 x 294k/300k
    # TTFT increases: le 0.1: 100, 0.5: 300, 1.0: 400, +Inf: 400; sum 120 s
    assert got["measured_ttft_mean_ms"] == pytest.approx(300.0, rel=1e-12)
    assert got["measured_ttft_p50_ms"] == pytest.approx(300.0, rel=1e-12)  # 0.1 + 0.4 x 100/200
    assert got["measured_ttft_p90_ms"] == pytest.approx(800.0, rel=1e-12)  # 0.5 + 0.5 x 60/100
    assert got["measured_ttft_p99_ms"] == pytest.approx(980.0, rel=1e-12)  # 0.5 + 0.5 x 96/100


def test_counter_restart_and_old_itl_name(tmp_path: Path) -> None:
    """A restart mid-window counts the new value as the increase; vLLM 0.10 exposing both ITL names
    uses inter_token_latency_seconds only."""
    text = "\n".join(
        [
            "# scraped_at: 2025-06-02T12:00:00Z",
            f"vllm:generation_tokens_total{{{LLAMA}}} 9000",
            *_hist("vllm:inter_token_latency_seconds", LLAMA, {"0.05": 0, "+Inf": 0}, 0),
            *_hist("vllm:time_per_output_token_seconds", LLAMA, {"0.05": 0, "+Inf": 0}, 0),
            "# scraped_at: 2025-06-02T12:05:00Z",
            f"vllm:generation_tokens_total{{{LLAMA}}} 1000",  # restarted: +1,000
            *_hist("vllm:inter_token_latency_seconds", LLAMA, {"0.05": 10, "+Inf": 10}, 0.2),
            *_hist("vllm:time_per_output_token_seconds", LLAMA, {"0.05": 10, "+Inf": 10}, 0.2),
            "# scraped_at: 2025-06-02T12:10:00Z",
            f"vllm:generation_tokens_total{{{LLAMA}}} 3000",  # +2,000
            *_hist("vllm:inter_token_latency_seconds", LLAMA, {"0.05": 30, "+Inf": 40}, 1.4),
            *_hist("vllm:time_per_output_token_seconds", LLAMA, {"0.05": 30, "+Inf": 40}, 1.4),
        ]
    )
    result = ingest(tmp_path, {"dep/m.prom": text + "\n"})
    got = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().row(0, named=True)
    assert got["measured_output_tokens_per_second"] == pytest.approx(3000 / 600, rel=1e-12)
    # one histogram, not two summed: 40 tokens, 1.4 s -> 35 ms; p50 rank 20 of (0, 0.05] holding 30
    assert got["measured_tpot_mean_ms"] == pytest.approx(35.0, rel=1e-12)
    assert got["measured_tpot_p50_ms"] == pytest.approx(50.0 * 20 / 30, rel=1e-12)
    assert got["measured_tpot_p99_ms"] == 50.0  # rank 39.6 in +Inf: the highest finite bound
    assert got["requests_in_window"] is None and got["observed_input_tokens"] is None


def test_sglang_series_are_summed(tmp_path: Path) -> None:
    """SGLang splits counters by is_streaming: two series, each rated on its own, then summed."""
    s, n = 'model_name="Qwen/Qwen3-8B",is_streaming="true"', 'model_name="Qwen/Qwen3-8B",is_streaming="false"'
    text = "\n".join(
        [
            "# scraped_at: 2025-06-02T12:00:00Z",
            f"sglang:generation_tokens_total{{{s}}} 100",
            f"sglang:generation_tokens_total{{{n}}} 5000",
            'sglang:num_running_reqs{model_name="Qwen/Qwen3-8B"} 8',
            'sglang:gen_throughput{model_name="Qwen/Qwen3-8B"} 999',
            "# scraped_at: 2025-06-02T12:01:40Z",
            f"sglang:generation_tokens_total{{{s}}} 20100",  # +20,000 in 100 s
            f"sglang:generation_tokens_total{{{n}}} 15000",  # +10,000 in 100 s
            'sglang:num_running_reqs{model_name="Qwen/Qwen3-8B"} 0',  # idle: not in the busy mean
        ]
    )
    result = ingest(tmp_path, {"sg/m.prom": text + "\n"})
    assert result.rejects.is_empty()
    got = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().row(0, named=True)
    assert got["measured_output_tokens_per_second"] == pytest.approx(300.0, rel=1e-12)  # 200 + 100
    assert got["observed_concurrency"] == 8.0


def test_gen_throughput_gauge_without_counters(tmp_path: Path) -> None:
    q = 'model_name="Qwen/Qwen3-8B"'
    text = f"# scraped_at: 2025-06-02T12:00:00Z\nsglang:gen_throughput{{{q}}} 1200\n"
    text += f"# scraped_at: 2025-06-02T12:01:00Z\nsglang:gen_throughput{{{q}}} 0\n"
    text += f"# scraped_at: 2025-06-02T12:02:00Z\nsglang:gen_throughput{{{q}}} 1800\n"
    result = ingest(tmp_path, {"sg/m.prom": text})
    got = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().row(0, named=True)
    assert got["measured_output_tokens_per_second"] == 1500.0  # mean of the non-zero samples
    assert got["measured_throughput_source"] == "gen_throughput"


def test_hostile_histograms_rejected_whole(tmp_path: Path) -> None:
    name = "vllm:inter_token_latency_seconds"
    cases = [
        ("non_monotone", {"0.01": 10, "0.025": 5, "+Inf": 12}, "bad_histogram", "decrease"),
        ("nan", {"0.01": "NaN", "0.025": 5, "+Inf": 12}, "not_finite", "nan"),
        ("negative", {"0.01": -3, "0.025": 5, "+Inf": 12}, "negative", "negative"),
        ("no_inf", {"0.01": 3, "0.025": 5}, "bad_histogram", "+Inf"),
    ]
    lines: list[str] = []
    for i, (_, buckets, _, _) in enumerate(cases):
        lines.append(f"# scraped_at: 2025-06-02T12:0{i}:00Z")
        lines += [f'{name}_bucket{{{LLAMA},le="{le}"}} {count}' for le, count in buckets.items()]
    lines.append("# scraped_at: 2025-06-02T12:09:00Z")  # a _count that disagrees with +Inf
    lines += _hist(name, LLAMA, {"0.01": 1, "+Inf": 4}, 0.1)
    lines[-1] = f"{name}_count{{{LLAMA}}} 5"
    lines.append(f'{name}_bucket{{{LLAMA},le="0.5",le2="x"}} 1')  # its own label set: no +Inf
    lines.append(f"vllm:num_requests_running{{{LLAMA}}} 3")  # a good line is kept
    result = ingest(tmp_path, {"dep/bad.prom": "\n".join(lines) + "\n"})
    got = rejects(result)
    codes = [code for _, _, code in got]
    # every line of every bad histogram is rejected: 3 + 3 + 3 + 2 buckets, then 4 (2 buckets, sum, count), then 1
    assert codes == ["bad_histogram"] * 3 + ["not_finite"] * 3 + ["negative"] * 3 + ["bad_histogram"] * 2 + [
        "bad_histogram"
    ] * 4 + ["bad_histogram"]
    reasons = list(result.rejects["reason"])
    assert "cumulative counts decrease: le=0.025 has 5 < 10 at le=0.01" in reasons[0]
    assert "no le=\"+Inf\" bucket" in reasons[9]
    assert "_count is 5 but the +Inf bucket holds 4" in reasons[11]
    assert list(result.samples["metric"]) == ["requests_running"]
    files = result.files.row(0, named=True)
    assert files["rows_in"] == files["accepted"] + files["rejected"] == 17


def test_prometheus_client_exposition_as_vllm_writes_it(tmp_path: Path) -> None:
    """The text prometheus_client (what vLLM exports with) writes for vLLM 0.33's histogram and
    counter, with HELP/TYPE and `_created` lines; one scrape = the distribution since start."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    registry = CollectorRegistry()
    # vLLM 0.33 INTER_TOKEN_LATENCY_BUCKETS (vllm/v1/metrics/buckets.py)
    buckets = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
    itl = Histogram("vllm:inter_token_latency_seconds", "ITL", ["model_name", "engine"], buckets=buckets,
                    registry=registry)  # fmt: skip
    tokens = Counter("vllm:generation_tokens", "generated", ["model_name", "engine"], registry=registry)
    series = itl.labels("meta-llama/Llama-3.1-8B-Instruct", "0")
    for seconds in (0.02, 0.02, 0.02, 0.06):
        series.observe(seconds)
    tokens.labels("meta-llama/Llama-3.1-8B-Instruct", "0").inc(5)
    text = "# scraped_at: 2025-06-02T12:00:00Z\n" + generate_latest(registry).decode()
    result = ingest(tmp_path, {"dep/metrics.prom": text})
    assert result.rejects.is_empty()
    assert sorted(set(result.samples["metric"])) == [
        "generation_tokens_total", "itl_seconds_bucket", "itl_seconds_count", "itl_seconds_sum"
    ]  # fmt: skip
    assert result.samples.filter(result.samples["metric"] == "itl_seconds_bucket").height == len(buckets) + 1
    got = deployment_summary(result.observations.lazy(), result.samples.lazy()).collect().row(0, named=True)
    assert got["measured_tpot_mean_ms"] == pytest.approx(30.0, rel=1e-9)  # (3 x 0.02 + 0.06) / 4
    # rank 2 of 4: 3 observations in (0.01, 0.025]: 0.01 + 0.015 x 2/3
    assert got["measured_tpot_p50_ms"] == pytest.approx(20.0, rel=1e-9)
    # rank 3.96: the 4th observation in (0.05, 0.075]: 0.05 + 0.025 x 0.96
    assert got["measured_tpot_p99_ms"] == pytest.approx(74.0, rel=1e-9)
    assert got["measured_output_tokens_per_second"] is None  # one scrape: no rate
