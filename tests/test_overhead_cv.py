"""Out-of-sample accuracy of the vLLM overhead model, as a regression gate.

Leave-one-source-out cross-validation on the public startup logs (evaluation/data/vllm_public_measurements.yaml;
evaluation/overhead_cv.py): a log is scored only by a fit that never saw its thread, repository
or campaign. The gates sit slightly below the figures measured when the derived model was introduced
(tools/overhead_cv.py prints them); they are not targets to tune to. The measured values are what vLLM
printed in those logs, never what capplan computed.
"""

from __future__ import annotations

import pytest

from evaluation.measurements import compare, load_measurements
from evaluation.overhead_cv import (
    DERIVED,
    PREVIOUS,
    Accuracy,
    Row,
    Scores,
    accuracy,
    build_rows,
    by_tag,
    cross_validated_scores,
    shipped_scores,
    source_group,
)
from models_registry.resolve import spec_and_checkpoint
from models_registry.sources.gpu_catalog import find_gpu_sku


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[list[Row], Scores, Scores]]:
    comparisons = compare(load_measurements(), spec_and_checkpoint, find_gpu_sku)
    out = {}
    for name, model in (("derived", DERIVED), ("previous", PREVIOUS)):
        rows = build_rows(comparisons, spec_and_checkpoint, model)
        out[name] = (rows, shipped_scores(rows, model), cross_validated_scores(rows, model))
    return out


def _tag(runs: dict[str, tuple[list[Row], Scores, Scores]], model: str, which: int, metric: str, tag: str) -> Accuracy:
    rows, *scores = runs[model]
    return by_tag(rows, getattr(scores[which], metric))[tag]


def test_source_groups() -> None:
    assert (
        source_group("https://github.com/vllm-project/vllm/issues/21348 (description by x)", "a")
        == "vllm-project/vllm#21348"
    )
    assert source_group("https://github.com/vllm-project/vllm/pull/2031 (comment)", "a") == "vllm-project/vllm#2031"
    assert source_group("https://github.com/llm-d/llm-d-benchmark/blob/abc/x.md", "a") == "llm-d/llm-d-benchmark"
    assert source_group("https://myoceane.fr/index.php/x/", "a") == "myoceane.fr"
    assert source_group("public GitHub markdown note", "row-1") == "row-1"


def test_accuracy_summary() -> None:
    a = accuracy([0.001, -0.02, 0.1, None])
    assert a.n == 3 and a.median_abs_error == pytest.approx(0.02)
    assert a.within_1pct == pytest.approx(1 / 3) and a.within_5pct == pytest.approx(2 / 3)


@pytest.mark.slow  # `runs` refits both models once per held-out source (~35 s on 2 cores)
def test_unmodelled_rows_are_flagged_not_fitted(runs: dict[str, tuple[list[Row], Scores, Scores]]) -> None:
    rows = {r.id: r for r in runs["derived"][0]}
    assert rows["vllm21348-qwen3-235b-a22b-fp8-h100-tp4"].unmodelled == "KV connector"  # LMCacheConnectorV1
    assert rows["vllm-pr12126-llama-3.2-11b-vision-h100-65k"].unmodelled == "multimodal encoder profiling"
    rocm = {i for i, r in rows.items() if r.unmodelled == "ROCm build"}  # MI300X: HIP graphs, ROCm's accounting
    assert rocm == {"recipes-pr273-v0171-rocm-minimax-m2-2x-mi300x-tp2",
                    "xbill9-v0311rc1-rocm-gemma-4-26b-a4b-it-mi300x-tp1-32k",
                    "xbill9-v0291rc1-rocm-gemma-4-e2b-it-mi300x-tp1-32k"}  # fmt: skip
    # a multimodal row whose encoder pass is sized from vLLM's source: scored, never fitted
    vl = rows["sipeed-v0110-qwen3-vl-30b-a3b-4x3090-tp4-64k"].unmodelled
    assert vl is not None and vl.startswith("multimodal encoder profiling")
    assert sum(r.unmodelled is not None for r in rows.values()) == 6
    assert all("V1 modelled" not in r.tags for r in rows.values() if r.unmodelled)


@pytest.mark.slow
def test_every_fold_holds_out_a_whole_source(runs: dict[str, tuple[list[Row], Scores, Scores]]) -> None:
    rows, _, cv = runs["derived"]
    assert len({r.group for r in rows}) >= 10
    assert set(cv.pool) == {r.id for r in rows}


@pytest.mark.slow
def test_cross_validated_kv_pool_gate(runs: dict[str, tuple[list[Row], Scores, Scores]]) -> None:
    # measured at introduction: V1 n=30 median 2.25 %, 73 % within 5 %. After the MXFP4 layouts, enforce_eager,
    # the per-graph CUDA-graph estimate, the NVLink-multicast non-torch term and the rows of the second
    # collection and the catalog additions: V1 n=41 median 2.13 %, 29 % within 1 %, 78 % within 5 %; all n=46
    # 2.41 %, 74 % within 5 %. With the sampler a rule per release (ec.VLLM_SAMPLER_RULES) instead of a fitted
    # count per era: V1 median 1.95 %, 41 % within 1 %, 83 % within 5 %; all 2.50 %, 78 % within 5 %. With
    # Marlin's MXFP4 layout on Hopper before 0.12 (vllm_weights.mxfp4_backend) and the llm-d-benchmark rows'
    # inferred release: V1 0.53 %, 59 % within 1 %, 93 % within 5 %; all 0.66 %, 87 % within 5 %. With the third
    # collection (8 vLLM logs, 4 scored; scored before any rule change: pool +2.86, +2.45, +3.16, +2.72 %), the V2
    # runner's sampler pass, the >= 160 GiB batch tier from 0.28 and ROCm rows flagged: V1 n=45 0.64 %, 51 %,
    # 93 %; the V1 rows capplan sizes (flagged ones apart) n=42 0.54 %, 55 %, 95 %; all n=50 1.12 %, 88 %. With the
    # 0.31 A100 breakdown row and the v1-late era (0.28's accounting): V1 n=46 0.61 %, 54 %, 93 %; sized n=43
    # 0.53 %, 58 %, 95 %; all n=51 0.84 %, 88 %
    v1 = _tag(runs, "derived", 1, "pool", "V1")
    assert v1.n >= 43
    assert v1.median_abs_error < 0.008 and v1.within_5pct >= 0.90 and v1.within_1pct >= 0.48
    modelled = _tag(runs, "derived", 1, "pool", "V1 modelled")
    assert modelled.n >= 40 and modelled.median_abs_error < 0.007 and modelled.within_5pct >= 0.92
    every = _tag(runs, "derived", 1, "pool", "all")
    assert every.median_abs_error < 0.013 and every.within_5pct >= 0.85


@pytest.mark.slow
def test_cross_validated_kv_tokens_gate(runs: dict[str, tuple[list[Row], Scores, Scores]]) -> None:
    # measured at introduction: V1 n=19 median 3.57 %, 63 % within 5 %; n=30 median 2.41 %, 77 % within 5 %;
    # with the sampler rule 0.87 %, 50 % within 1 %, 80 % within 5 %; n=29 once the robotmunki row lost the H100
    # its own numbers rule out (now unscored): 0.68 %, 52 %, 86 %; with the third collection and the V2 runner's
    # sampler pass: n=33 1.50 %, 42 %, 88 %; the V1 rows capplan sizes n=29 1.18 %, 48 %, 93 %; with the v1-late
    # era: n=34 1.10 %, 50 %, 88 %; sized n=30 0.63 %, 57 %, 93 %
    v1 = _tag(runs, "derived", 1, "tokens", "V1")
    assert v1.n >= 31 and v1.median_abs_error < 0.018 and v1.within_5pct >= 0.85
    modelled = _tag(runs, "derived", 1, "tokens", "V1 modelled")
    assert modelled.n >= 27 and modelled.median_abs_error < 0.014 and modelled.within_5pct >= 0.90


@pytest.mark.slow
def test_in_sample_with_shipped_coefficients(runs: dict[str, tuple[list[Row], Scores, Scores]]) -> None:
    # measured at introduction: V1 pool median 0.15 %, 87 % within 5 % (30 rows); 0.49 %, 83 % (41 rows);
    # with the sampler rule 0.28 %, 85 %; with Marlin's layout before 0.12 0.26 %, 90 %
    v1 = _tag(runs, "derived", 0, "pool", "V1")
    assert v1.median_abs_error < 0.004 and v1.within_5pct >= 0.88


@pytest.mark.slow
def test_moe_out_of_sample_against_the_previous_model(runs: dict[str, tuple[list[Row], Scores, Scores]]) -> None:
    # measured at introduction: MoE pool CV median 3.20 % (derived) against 3.60 % (previous); 2.83 % against
    # 3.31 % before the sampler rule. With the rule 3.44 % (30 % within 1 %, 60 % within 5 %) against 3.31 %
    # (20 %, 60 %): the median of 10 rows sits between two held-out rows (gpt-oss-20b TP 2 on 0.19 +3.7 %,
    # gpt-oss-20b on llm-d-benchmark -3.2 %); the rule is what the engine does, not a figure to tune. With
    # Marlin's layout before 0.12 (both models gain: the weights are shared): 0.57 % (60 %, 80 %) against 1.49 %
    # (40 %, 90 %); the one row the previous model has within 5 % and this one not is vllm#27508, a failed
    # start with a 1.71 GiB pool, at +6.5 %. Over the MoE rows capplan sizes (LMCache and ROCm rows apart), with
    # the third collection: 0.64 % (55 %, 91 %; signed median +0.50 %, 8 of 11 above) against 2.38 % (36 %, 100 %)
    derived = _modelled(runs, "derived", "MoE")
    previous = _modelled(runs, "previous", "MoE")
    assert derived.n == previous.n >= 9
    assert derived.median_abs_error < 0.01 and derived.median_abs_error <= previous.median_abs_error
    assert derived.within_5pct >= 0.85 and derived.within_1pct >= previous.within_1pct
    assert abs(derived.median_signed_error) < 0.01  # no systematic sign of the size of the old MoE misses


def _modelled(runs: dict[str, tuple[list[Row], Scores, Scores]], model: str, tag: str) -> Accuracy:
    """Cross-validated pool accuracy over the rows with `tag` that capplan sizes (flagged rows apart)."""
    rows, _, cv = runs[model]
    return accuracy(cv.pool.get(r.id) for r in rows if tag in r.tags and r.unmodelled is None)
