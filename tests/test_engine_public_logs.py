"""capplan's SGLang and TensorRT-LLM profiles against public startup logs, as a regression gate.

The measured values are what the engines printed (evaluation/data/sglang_public_measurements.yaml,
trtllm_public_measurements.yaml), never what capplan computed; evaluation/engine_logs.py scores
them and tools/engine_log_cv.py prints the tables. The gates sit slightly around the figures measured when the
release-aware SGLang defaults were introduced; they are not targets to tune to.
"""

from __future__ import annotations

import pytest

from capacity.dtypes import GIB
from capacity.kv_bytes import kv_bytes_per_token_per_gpu
from capacity.spec import ModelSpec
from evaluation import engine_logs as el
from models_registry.resolve import load_model
from models_registry.sources.gpu_catalog import find_gpu_sku


def _resolve(repo_id: str) -> tuple[ModelSpec, int | None]:
    resolved = load_model(repo_id)
    return resolved.spec, resolved.checkpoint_bytes


@pytest.fixture(scope="module")
def runs() -> dict[bool, tuple[list[el.Scored], el.EngineScores, el.EngineScores]]:
    rows = el.load_engine_logs()
    out = {}
    for aware in (True, False):
        scored, shipped = el.shipped_scores(rows, _resolve, find_gpu_sku, version_aware=aware)
        out[aware] = (scored, shipped, el.refit_scores(scored, _resolve, find_gpu_sku, cross_validated=True,
                                                       version_aware=aware))  # fmt: skip
    return out


def test_rows_name_their_source_and_era() -> None:
    rows = {r.id: r for r in el.load_engine_logs()}
    assert len({r.group for r in rows.values()}) == len(rows)  # every row its own thread or repository
    assert rows["llms-in-clouds-sglang-0.4.3.post4-qwq-32b-l4-tp4"].era == "0.4"
    assert rows["sglang-pr4760-llama-3.1-8b-instruct-h100-tp1"].era == "0.4"  # release_era: the log's date
    assert rows["trtllm-issue6294-llama-3.1-8b-fp8-h100-tp1"].unmodelled == el.UNMODELLED_FEATURES["max_tokens"]
    # a fraction the 0.4.x defaults chose is not taken from the log: the profile must derive it
    assert rows["llms-in-clouds-sglang-0.4.3.post4-qwq-32b-l4-tp4"].fraction is None


def test_every_started_server_is_predicted_as_starting(runs) -> None:  # type: ignore[no-untyped-def]
    scored, shipped, _ = runs[True]
    unmodelled = {s.row.id for s in scored if s.row.unmodelled}
    decided = {k: v for k, v in shipped.starts.items() if v is not None}
    # measured with the 2026-12 rows: 19 decisions (14 SGLang, 5 of them not modelled; 5 TensorRT-LLM, 3 not
    # modelled); the one scored failed start is not modelled (ROCm + DP attention, sglang#7691: predicted as
    # starting, wrong); the other failed starts are unscored (their model is not in the catalog: Gemma-7B,
    # DeepSeek-V4-Pro) or marked as the engine's failure (TRT-LLM #5872). Every modelled decision must be
    # right; a not-modelled one is reported
    modelled = {k: v for k, v in decided.items() if k not in unmodelled}
    assert len(modelled) >= 9 and all(modelled.values())
    assert sum(v for k, v in decided.items() if k in unmodelled) >= 4
    # the previous model (0.5.23 defaults for a 0.4.3 log: fraction 0.658 on a 24 GB L4) refused this server
    assert runs[False][1].starts["llms-in-clouds-sglang-0.4.3.post4-qwq-32b-l4-tp4"] is False


def test_legacy_default_fraction_reproduces_the_logged_pool(runs) -> None:  # type: ignore[no-untyped-def]
    # measured at introduction: -0.10 % (QwQ-32B, 4 x L4, 0.85), +0.17 % and -0.24 % (Llama-3.1-8B, 80 GB, 0.88);
    # 0.5.18 with the fraction stated: +0.27 % (Qwen3-4B, H100)
    _, shipped, _ = runs[True]
    for row_id in ("llms-in-clouds-sglang-0.4.3.post4-qwq-32b-l4-tp4", "sglang-pr4760-llama-3.1-8b-instruct-h100-tp1",
                   "sglang-docs-send-request-2025-01-llama-3.1-8b-instruct-80gb-tp1",
                   "unresolved-sglang-0.5.18-qwen3-4b-h100-tp1"):  # fmt: skip
        assert abs(shipped.pool[row_id] or 1) < 0.01
        assert abs(shipped.tokens[row_id] or 1) < 0.01
    # the previous model: -7.2 % on the H100 row (0.83 instead of 0.88)
    assert runs[False][1].pool["sglang-pr4760-llama-3.1-8b-instruct-h100-tp1"] == pytest.approx(-0.0716, abs=0.002)


def test_sglang_table_shipped_and_cross_validated(runs) -> None:  # type: ignore[no-untyped-def]
    rows = el.load_engine_logs()
    _, shipped, cv = runs[True]
    ship = el.table(rows, shipped.pool)["sglang"]
    held_out = el.table(rows, cv.pool)["sglang"]
    # measured with the 2026-12 rows (modelled rows only; the not-modelled ones are reported apart): shipped n=8
    # (+1 the RTX 5080 row once the catalog has the GPU and the 0.4.8-0.5.2 default; -1 the WSL2 RTX 3090 row, now
    # shared_gpu), median 0.25 % (was 0.25), 75 % within 1 % (was 75), 88 % within 5 % (was 75); leave-one-source-
    # out of the one fitted term median 0.89 % (was 0.96), 50 % within 1 % (was 50), 88 % within 5 % (was 75). With
    # the TP > 1 NVLink-switch context term (read off two other logs, not refit): 100 % within 5 % shipped and
    # held out, medians unchanged (the one row it moves, Qwen3-235B on 4 x H100, +9.0 % -> +1.4 %)
    assert ship.n >= 8 and ship.median_abs_error < 0.004 and ship.within_5pct >= 0.99 and ship.within_1pct >= 0.74
    assert held_out.n == ship.n and held_out.median_abs_error < 0.011 and held_out.within_5pct >= 0.99
    # refitting the one term out of sample is worse than the shipped constant: it stays as shipped
    assert held_out.median_abs_error > ship.median_abs_error


def test_trtllm_printed_bytes_are_whole_blocks_of_the_model_cell() -> None:
    # tokens = blocks x 32, and GiB printed = tokens x the per-token KV of the model (hand: layers x KV heads x
    # head dim x 2 x bytes): the log's own arithmetic, checked against capplan's per-token bytes
    cases = [("Qwen/Qwen3-0.6B", 2, 643136, 68.69), ("meta-llama/Llama-3.1-8B-Instruct", 1, 263008, 16.05),
             ("meta-llama/Llama-3.1-8B-Instruct", 1, 860320, 52.51)]  # fmt: skip
    for model, kv_bytes, tokens, gib in cases:
        assert tokens % 32 == 0
        per_token = kv_bytes_per_token_per_gpu(load_model(model).spec, kv_bytes, 1, 1)
        assert tokens * per_token / GIB == pytest.approx(gib, abs=0.005)
    assert -(-860308 // 32) * 32 == 860320  # max_tokens rounded up to whole blocks (issue 6294)
    assert round(17.83 * 0.9, 2) == 16.05  # the engine row: the fraction of what is free after the engine


def test_trtllm_pytorch_backend_pool(runs) -> None:  # type: ignore[no-untyped-def]
    # measured at introduction: -3.89 % (Qwen3-0.6B class on an H100, default fraction 0.9)
    _, shipped, _ = runs[True]
    assert abs(shipped.pool["unresolved-trtllm-pytorch-qwen3-reranker-0.6b-h100-tp1"] or 1) < 0.05
    # prebuilt engines are not modelled but scored: +2.86 % on the 0.12 dev FP8 Llama-2-7B docs run (GiB line; 0.99
    # of 63.62 GiB available), +49.6 % tokens on the 0.5-era A10 engine (capplan cannot see the engine's runtime
    # buffers and decoder memory): reported under 'trtllm not modelled'
    assert shipped.pool["trtllm-suite-0.12.0.dev-llama-2-7b-fp8-h100-tp1"] == pytest.approx(0.0286, abs=0.01)
    assert shipped.tokens["trtllm-issue224-llama-2-7b-a10-tp1"] == pytest.approx(0.496, abs=0.02)


def test_unknown_release_row_within_its_stated_tolerance(runs) -> None:  # type: ignore[no-untyped-def]
    rows = {r.id: r for r in el.load_engine_logs()}
    assert rows["my-deepseek-r1-sglang-2025-02-r1-distill-qwen-7b-rtx3090-tp1"].unmodelled == el.UNMODELLED_FEATURES[
        "shared_gpu"]
    # the Windows desktop of the RTX 3090 row holds memory capplan cannot see: +7.5 %, a known miss, reported under
    # "sglang not modelled" (shared_gpu) since 2026-12
    assert shipped_pool(runs, "my-deepseek-r1-sglang-2025-02-r1-distill-qwen-7b-rtx3090-tp1") == pytest.approx(0.0748, abs=0.01)
    # vllm#21348 (July 2025, release not stated, Qwen3-235B-A22B-FP8 on 4 x H100 at 0.93): the constant alone
    # left 9 % more KV memory than SGLang did (a non-KV term of 2.1 GiB implied against 0.6); the NVLink-switch
    # context at TP > 1, read off the grok-2 8 x H100 log's free memory at load begin against one H100's (1.38 GiB
    # more in use, x 0.9), takes it to +1.4 %
    _, shipped, _ = runs[True]
    assert shipped.pool["vllm21348-sglang-qwen3-235b-a22b-fp8-h100-tp4"] == pytest.approx(0.0144, abs=0.005)


def test_unknown_release_and_unmodelled_features_are_said() -> None:
    from capacity.estimate import estimate
    from capacity.spec import DeploymentSpec

    resolved = load_model("meta-llama/Llama-3.1-8B-Instruct")
    h100 = find_gpu_sku("H100")

    def notes(**kw: object) -> str:
        return " | ".join(estimate(resolved.spec, DeploymentSpec(**kw), gpu=h100,  # type: ignore[arg-type]
                                   checkpoint_bytes=resolved.checkpoint_bytes).notes)  # fmt: skip

    unstated = notes(engine="sglang")
    # 0.88 (0.4.x, one GPU) against 0.5.23's 0.83 on an H100: 5 % of 79.2 GiB, more than 5 % of the budget
    assert "no --engine-version" in unstated and "0.88" in unstated
    assert "speculative decoding" in unstated and "DP attention" in unstated
    assert "no --engine-version" not in notes(engine="sglang", engine_version="0.4.4")
    # a 24 GB card: 0.5.20+ reserve more (0.704) than 0.5.10-0.5.19 did (0.833; server_args.py of those wheels)
    rtx = " | ".join(estimate(resolved.spec, DeploymentSpec(engine="sglang"), gpu=find_gpu_sku("RTX 4090"),
                              checkpoint_bytes=resolved.checkpoint_bytes).notes)  # fmt: skip
    assert "0.833 (0.5.10-0.5.19)" in rtx and "not 0.704" in rtx
    # the FlashInfer sampler (3 fp32 logits copies against the torch sort's 9 at 256 rows): off by default on
    # 0.10.1.1 unless installed and on 0.12-0.20 unless asked for; from 0.21 the dummy run warms both paths
    l4 = find_gpu_sku("L4")
    for version, said in (("0.10.1.1", True), ("0.15.1", True), ("0.33", False)):
        text = " | ".join(estimate(resolved.spec, DeploymentSpec(engine_version=version), gpu=l4,
                                   checkpoint_bytes=resolved.checkpoint_bytes).notes)  # fmt: skip
        assert ("assumed the FlashInfer sampler off" in text) is said, version
    assert "speculative decoding" in notes(engine="trtllm")
    assert "speculative decoding" not in notes(engine="vllm")


def shipped_pool(runs, row_id: str) -> float | None:  # type: ignore[no-untyped-def]
    return runs[True][1].pool[row_id]  # type: ignore[no-any-return]


def test_a_short_pool_that_starts_says_so(runs) -> None:  # type: ignore[no-untyped-def]
    # QwQ-32B on 4 x L4 at 131,072 tokens: SGLang started with 46,611 tokens; capplan's verdict must not read
    # as a refusal: the request of max_model_len does not fit, the server starts
    scored, _, _ = runs[True]
    est = next(s.predicted for s in scored if s.row.id == "llms-in-clouds-sglang-0.4.3.post4-qwq-32b-l4-tp4")
    assert est is not None and est.starts and not est.fits
    assert "the server starts all the same" in est.reason and f"{est.kv_cache_tokens:,} tokens" in est.reason


# the numbers a row records, each of which must be printed in its verbatim log_excerpt
LOGGED_FIELDS = {
    "sglang": ("max_total_num_tokens", "k_size_gb", "v_size_gb", "kv_size_gb", "avail_mem_gb", "weights_gb",
               "mem_fraction_static", "context_length"),
    "trtllm": ("kv_cache_gib", "kv_cache_bytes", "kv_cache_tokens", "num_blocks", "total_gib", "available_gib",
               "free_gpu_memory_fraction", "tokens_per_block", "max_tokens"),
}  # fmt: skip


def _printed_numbers(text: str) -> set[float]:
    """Every number in a log excerpt, and a percentage as the fraction it states ('99.0%' -> 0.99)."""
    import re

    out: set[float] = set()
    for match in re.finditer(r"(?<![\w.])(\d+(?:\.\d+)?)(%?)", text.replace(",", "")):
        value = float(match.group(1))
        out.add(value / 100 if match.group(2) else value)
    return out


def test_every_recorded_number_is_printed_in_its_log_excerpt() -> None:
    import math

    misses = []
    for row in el.load_engine_logs():
        printed = _printed_numbers(str(row.raw.get("log_excerpt") or ""))
        for key in LOGGED_FIELDS[row.engine]:
            value = row.raw.get(key)
            if value is None or isinstance(value, bool):
                continue
            # float32 as the engine prints it: gpt-oss's "0.8999999761581421" is the 0.9 it was given
            if not any(math.isclose(float(value), p, rel_tol=1e-7, abs_tol=0) for p in printed):
                misses.append(f"{row.id}: {key}={value}")
    assert not misses, misses


def test_the_log_formats_of_mla_pools_and_old_trtllm_are_read() -> None:
    rows = {r.id: r for r in el.load_engine_logs()}
    # "KV Cache is allocated. #tokens: 2454421, KV size: 160.63 GB" (an MLA pool has no K/V split)
    assert rows["unresolved-sglang-0.5.8.post1-rocm-kimi-k2.5-mi355x-tp8"].pool_bytes == round(160.63 * GIB)
    # hand: 61 layers x (512 + 64) latent x 2 B = 70,272 B per token; 2,454,421 tokens = 160.63 GiB as printed
    assert round(2454421 * 61 * 576 * 2 / GIB, 2) == 160.63
    # TensorRT-LLM 0.8-0.10: "Allocate 69524783104 bytes for k/v cache" = 132,608 tokens x 512 KiB (Llama-2-7B shape)
    assert rows["trtllm-issue1400-v0.8-smoothquant-7b-class-a100"].pool_bytes == 69524783104 == 132608 * 32 * 32 * 128 * 2 * 2
    assert rows["trtllm-backend-issue456-gemma-7b-a100-80gb-oom"].pool_bytes == 54022635520 == 117760 * 28 * 16 * 256 * 2 * 2


def test_outcomes_and_what_is_not_scored_are_said() -> None:
    rows = {r.id: r for r in el.load_engine_logs()}
    assert rows["trtllm-backend-issue456-gemma-7b-a100-80gb-oom"].outcome == "failed"
    assert rows["sglang-issue6027-deepseek-mla-dp-attention"].outcome == "started"  # "started; later CUDA OOM ..."
    kimi = rows["unresolved-sglang-0.5.8.post1-rocm-kimi-k2.5-mi355x-tp8"]  # graph-capture error after the KV pool
    assert kimi.outcome == "unknown" and kimi.start_note and "not a memory failure" in kimi.start_note
    # TRT-LLM #5872: KV creation failed with 108.86 GiB free (an engine failure): marked, never a start decision
    oom = rows["trtllm-issue5872-qwen3-235b-a22b-fp8-h200-tp8-oom"]
    assert oom.outcome == "unknown" and oom.start_note and "108.86 GiB free" in oom.start_note
    # 0.12 dev docs run: 4,607 blocks x 64 at 256 KiB (fp8 Llama-2-7B) would be 71.98 GiB, not the printed 62.99
    suite = rows["trtllm-suite-0.12.0.dev-llama-2-7b-fp8-h100-tp1"]
    assert suite.tokens is None and suite.tokens_note and suite.pool_bytes == round(62.99 * GIB)
    assert round(4607 * 64 * 32 * 32 * 128 * 2 / GIB, 2) == 71.98
    # features capplan does not size: scored, never fitted, with the reason; a tag nobody knows is said too
    assert rows["unresolved-sglang-dev-2026-04-qwen3.5-9b-rtx4090-tp2"].unmodelled == el.UNMODELLED_FEATURES["hybrid_mamba"]
    assert el.UNMODELLED_FEATURES["unified_memory"] in (rows["unresolved-trtllm-1.1.0rc3-gpt-oss-120b-dgx-spark-tp1"].unmodelled or "")
    assert oom.unmodelled is None  # block reuse off does not change the pool's size
    odd = el._unmodelled({"engine": "sglang", "features": ["warp_drive"]})
    assert odd == "unrecognised feature tag 'warp_drive'"


def test_rows_the_log_or_catalog_cannot_place_are_unscored_with_a_reason(runs) -> None:  # type: ignore[no-untyped-def]
    scored = {s.row.id: s for s in runs[True][0]}
    assert scored["dynamo-trtllm-readme-2025-02-llama-8b-class-h100-tp1"].skipped == "model not stated in the log"
    assert scored["sglang-issue2468-mistral-7b-instruct-v0.1-tp1"].skipped == "GPU not stated in the log"
    assert scored["unresolved-sglang-0.5.11-qwen3.6-27b-fp8-rtxpro6000"].skipped == "tensor-parallel size not stated in the log"
    # a not-modelled row is scored and reported apart, never in the engine's own figures nor in the fit
    kt = scored["unresolved-sglang-kt-qwen3-30b-a3b-cpu-experts-h100-tp1"]
    assert kt.pool_error is not None and el.tags(kt.row) == ("sglang not modelled",)


def test_sglang_default_fraction_on_a_b200(runs) -> None:  # type: ignore[no-untyped-def]
    # SGLang's own reference startup log (Qwen3-8B, Blackwell, April 2026, fraction chosen by the engine):
    # measured +0.08 % pool and tokens with the 0.5 defaults (992,896 tokens, K + V = 136.36 GiB printed)
    _, shipped, _ = runs[True]
    assert abs(shipped.pool["sglang-skill-clean-startup-log-qwen3-8b-b200-tp1"] or 1) < 0.005
    assert abs(shipped.tokens["sglang-skill-clean-startup-log-qwen3-8b-b200-tp1"] or 1) < 0.005


def test_tiered_release_default_reproduces_the_rtx5080_pool(runs) -> None:  # type: ignore[no-untyped-def]
    # August 2025, fraction not printed: 0.4.10 / 0.5.0rc both default to (16,303 - 2,969.6) / 16,303 = 0.818, which
    # the log implies (13.91 - 15.16 x (1 - f) = 11.14 GB: f ~ 0.82). Measured at introduction: -2.1 % (the pool
    # 11.14 GB, capplan 10.90 GiB: the shipped 0.6 GiB term is most of a 16 GB card's miss); the 0.5.23 rules
    # (fraction 0.747 by its reserve) gave -11.4 %
    assert shipped_pool(runs, "unresolved-sglang-2025-08-qwen3-0.6b-rtx5080-tp1") == pytest.approx(-0.021, abs=0.01)
    assert runs[False][1].pool["unresolved-sglang-2025-08-qwen3-0.6b-rtx5080-tp1"] == pytest.approx(-0.114, abs=0.01)


def test_tiered_default_is_the_logs_own_arithmetic() -> None:
    # 0.4.8-0.5.2: rest = avail_after_weights - free_before_load x (1 - f), f = the tiered default of the device's
    # nvidia-smi total, must give the logged K + V (GB as printed) for the rows of that era that print the weights:
    # grok-2 on 8 x H100 (0.5.2rc2, 81,559 MiB: f 0.831), Llama-3.1-8B on a 24 GB card (July 2025: f 0.879),
    # Qwen3-0.6B on an RTX 5080 (August 2025: f 0.818); from the yaml's logged numbers, not capplan's estimate
    from capacity.engines import sglang as sg

    rows = {r.id: r.raw for r in el.load_engine_logs()}
    cases = [("unresolved-sglang-0.5.2rc2-grok-2-fp8-h100-tp8", "h100-sxm-80gb", 8, 0.831),
             ("sglang-docker-desktop-readme-2025-07-llama-3.1-8b-24gb-tp1", "rtx-4090-24gb", 1, 0.879),
             ("unresolved-sglang-2025-08-qwen3-0.6b-rtx5080-tp1", "rtx-5080-16gb", 1, 0.818)]  # fmt: skip
    for row_id, sku, tp, fraction in cases:
        raw = rows[row_id]
        smi_mib = find_gpu_sku(sku).memory_total_mib_smi
        assert sg.tiered_mem_fraction_static(smi_mib * 2**20, tp, 1) == fraction
        before = raw["avail_mem_gb"] + raw["weights_gb"]
        rest = raw["avail_mem_gb"] - before * (1 - fraction)
        assert rest == pytest.approx(raw["k_size_gb"] + raw["v_size_gb"], abs=0.04)
