"""marts.feature_value rows for KV offload, LoRA and speculative decoding (issue 23 item 8), each derived by hand
on Llama-3.1-8B-Instruct at TP 1 on an H100 SXM (vLLM, bf16, blocks of 16 tokens, 90 % headroom).

The pool of each deployment is the estimate's (num_blocks: what the estimate tests check against vLLM's own
planner); B_max = min(num_blocks // cdiv(T, 16), max_num_seqs) sequences of T tokens, planned at
floor(0.9 x B_max), and a workload of C sequences takes ceil(C / planned) replicas of one GPU.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from capacity.calibration import fit_calibration
from capacity.estimate import Estimate, estimate
from capacity.features.lora import AdapterSet
from capacity.performance import efficiency_for, perf_inputs, step_seconds
from capacity.spec import DeploymentSpec
from models_registry.planning import Catalog, bundled_catalog
from recommendations.feature_value import FEATURE_VALUE_SCHEMA, feature_value_frame
from recommendations.workloads import parse_workloads

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
H100 = "h100-sxm-80gb"
BASE = {"model": LLAMA, "gpus": [H100], "max_gpus_per_replica": 1}
RAM = {"usd_per_gib_hour": 0.0036, "source": "AWS us-east-1 on-demand r7i.large - c7i.large, per GiB of the difference"}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return bundled_catalog([LLAMA], [H100])


def _rows(catalog: Catalog, workload: dict[str, object], **procurement: object) -> dict[str, dict[str, Any]]:
    parsed = parse_workloads({"workloads": [{**BASE, **workload}], "procurement": procurement})
    assert not parsed.errors
    frame = feature_value_frame(parsed, catalog, fit_calibration([]))
    assert frame.schema == FEATURE_VALUE_SCHEMA
    return {row["feature"]: row for row in frame.iter_rows(named=True)}


def _est(catalog: Catalog, context: int, **deployment: object) -> Estimate:
    spec = DeploymentSpec(max_model_len=context, **deployment)  # type: ignore[arg-type]
    return estimate(catalog.models[LLAMA].spec, spec, gpu=catalog.gpus[H100], context_tokens=context)


def _planned(est: Estimate, context: int) -> int:
    return math.floor(min(est.num_blocks // -(-context // 16), est.max_num_seqs or 10**9) * 0.9)


def _price(catalog: Catalog) -> float:
    return catalog.gpus[H100].price_usd_per_gpu_hour or 0.0


def test_kv_offload_row_is_host_ram_against_the_prefixes_in_the_gpu_pools(catalog: Catalog) -> None:
    """256 sequences of 8,192 tokens (8,000 prompt), 90 % hit rate, TTFT target 200 ms (recompute misses it):
    kept prefixes 256 x floor(0.9 x 8,000) = 1,843,200 tokens = 225 GiB at 131,072 B a token ($0.81/h);
    with offload ceil(256 / B) GPUs + $0.81/h, without it ceil((256 + 1,843,200 / 8,192) / B) GPUs."""
    chat = {"name": "chat", "target_concurrency": 256, "context_tokens": 8192, "output_tokens": 192}
    chat |= {"max_model_len": 8192, "prefix_hit_rate": 0.9, "ttft_ms_target": 200}
    rows = _rows(catalog, chat, whole_nodes=False, host_memory=RAM)
    row, price = rows["kv_offload"], _price(catalog)
    planned = _planned(_est(catalog, 8192), 8192)
    gpus_with, gpus_without = math.ceil(256 / planned), math.ceil((256 + 225) / planned)
    assert (row["gpus_with"], row["gpus_without"]) == (gpus_with, gpus_without)
    assert row["usd_per_hour_with"] == pytest.approx(gpus_with * price + 225 * 0.0036)
    assert row["usd_per_hour_saved"] == pytest.approx((gpus_without - gpus_with) * price - 225 * 0.0036)
    assert (row["rate"], row["rate_source"]) == (0.9, "stated") and RAM["source"] in row["setting"]
    # no host price: no offload to value (the prefix caching row stays)
    assert set(_rows(catalog, chat, whole_nodes=False)) == {"prefix_caching"}


def test_lora_row_is_one_multi_lora_deployment_against_one_per_adapter(catalog: Catalog) -> None:
    """64 sequences of 4,096 tokens over 4 adapters of rank 16: with multi-LoRA one deployment holds 4 adapter
    slots (vLLM --max-loras 4, charged before the KV cache: a smaller pool) for all 64; without it each adapter
    is merged into its own deployment for ceil(64 / 4) = 16 sequences, at least a GPU each."""
    rows = _rows(catalog, {"name": "tenants", "target_concurrency": 64, "context_tokens": 4096, "adapters": 4})
    row = rows["lora"]
    lora = AdapterSet(4).lora_spec()
    with_slots, plain = _est(catalog, 4096, lora=lora), _est(catalog, 4096)
    assert with_slots.num_blocks < plain.num_blocks  # the slots are paid from the KV pool
    gpus_with = math.ceil(64 / _planned(with_slots, 4096))
    gpus_without = 4 * math.ceil(16 / _planned(plain, 4096))
    assert (row["gpus_with"], row["gpus_without"]) == (gpus_with, gpus_without) == (1, 4)
    assert row["usd_per_hour_saved"] == pytest.approx(3 * _price(catalog))
    assert row["setting"] == "4 adapters of rank 16, 4 GPU slots"


def test_speculative_row_is_the_batch_a_tpot_target_allows_with_and_without(catalog: Catalog) -> None:
    """ngram proposals (nothing on the GPU), k = 3 at acceptance 0.6, TPOT target 15 ms, 256 sequences of 4,096
    tokens (512 output): a step of B sequences without speculation makes B tokens, with it verifies 4B tokens and
    keeps 1 + 0.6 + 0.36 + 0.216 = 2.176 tokens a sequence; B per replica is the largest (up to the memory's)
    whose TPOT meets 15 ms, found here by walking B up, on the performance model's step time."""
    work = {"name": "agent", "target_concurrency": 256, "context_tokens": 4096, "output_tokens": 512}
    work |= {"tpot_ms_target": 15, "speculative": {"method": "ngram", "num_speculative_tokens": 3}}
    row = _rows(catalog, {**work, "acceptance_rate": 0.6})["speculative_decoding"]
    est = _est(catalog, 4096)
    p, eff = (
        perf_inputs(catalog.models[LLAMA].spec, est, catalog.gpus[H100]),
        efficiency_for("vllm", catalog.gpus[H100]),
    )
    context = 4096 - 512 + 256  # the prompt and half the output, on average over the decode
    memory_b = _planned(est, 4096)

    def largest(tpot_ms: float, tokens_per_sequence: int, kept: float) -> int:
        fits = [
            b
            for b in range(1, memory_b + 1)
            if step_seconds(p, b * tokens_per_sequence, b, context, eff) * 1e3 / kept <= tpot_ms
        ]
        return max(fits)

    b_with, b_without = largest(15, 4, 1 + 0.6 + 0.36 + 0.216), largest(15, 1, 1.0)
    assert b_with > b_without
    assert (row["gpus_with"], row["gpus_without"]) == (math.ceil(256 / b_with), math.ceil(256 / b_without))
    assert row["gpus_saved"] > 0 and (row["rate"], row["rate_source"]) == (0.6, "stated")
    # without an acceptance rate the draft is sized (memory) but no speed-up is claimed: no GPUs saved
    plain = _rows(catalog, work)["speculative_decoding"]
    assert plain["rate"] is None and plain["gpus_saved"] <= 0


def test_the_report_section_says_what_each_feature_saves() -> None:
    """Totals per feature over a hand-built frame: LoRA 3 + 1 = 4 GPUs and $20.64 + $6.88 = $27.52/h; offload
    one row without a placement on one side (its savings unknown, counted apart)."""
    import great_tables as gt
    import polars as pl

    from recommendations.report_features import feature_totals, feature_value_html

    rows: list[dict[str, Any]] = [
        {"workload": "a", "model": "m", "feature": "lora", "gpus_saved": 3, "usd_per_hour_saved": 20.64},
        {"workload": "b", "model": "m", "feature": "lora", "gpus_saved": 1, "usd_per_hour_saved": 6.88},
        {"workload": "c", "model": "m", "feature": "kv_offload", "reason": "no feasible placement"},
    ]
    frame = pl.DataFrame([{k: r.get(k) for k in FEATURE_VALUE_SCHEMA} for r in rows], schema=FEATURE_VALUE_SCHEMA)
    totals = {r["feature"]: r for r in feature_totals(frame).iter_rows(named=True)}
    assert (totals["lora"]["gpus_saved"], totals["lora"]["usd_per_hour_saved"]) == (4, pytest.approx(27.52))
    assert (totals["kv_offload"]["rows"], totals["kv_offload"]["unplaced"]) == (1, 1)
    page = feature_value_html(gt, frame, "m")
    assert "<b>lora</b>: 4 GPUs, $27.52/h saved over 2 of 2" in page and "a deployment per adapter" in page
    assert "1 without a placement on one side" in page and "marts.feature_value" in page


def test_the_commented_feature_examples_in_workloads_yaml_parse() -> None:
    """The shipped file's commented examples (one per feature field) read as valid profiles once uncommented."""
    from pathlib import Path

    import yaml

    text = (Path(__file__).resolve().parents[1] / "workloads.yaml").read_text()
    block = text.split("# One example per feature field", 1)[1].split("\nschema_version:", 1)[0]
    lines = [line[2:] if line.startswith("# ") else "" for line in block.splitlines()[1:]]
    procurement, workloads = "\n".join(lines).split("\n  - name:", 1)
    document = yaml.safe_load(procurement + "\nworkloads:\n  - name:" + workloads)
    parsed = parse_workloads(document)
    assert not parsed.errors
    assert parsed.procurement.host_memory is not None and parsed.procurement.local_nvme is not None
    by_name = {p.name: p for p in parsed.profiles}
    assert by_name["support-bot"].prefix_caching.hit_rate == 0.9
    assert by_name["tenant-finetunes"].adapters == AdapterSet(8, 32)
    assert by_name["agent-tools"].acceptance_rate == 0.6 and by_name["agent-tools"].speculative is not None
