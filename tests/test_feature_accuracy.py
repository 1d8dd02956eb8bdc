"""tools/feature_accuracy.py: the reference rows that ran with a serving feature on are sized through the feature rules
(not flagged, not skipped), and the per-feature report runs.

Oracles are the engines' own figures and source: vLLM's printed "62.00 GiB KV cache is needed" for 262,144 tokens
(recipes PR #12) against Qwen3-Coder-480B's config (62 layers, 8 KV heads of 128, bf16 KV: one DP rank holds every
head); SGLang 0.5.23's srt/layers/moe/kt_ep_wrapper.py for the --kt-* flags.
"""

from __future__ import annotations

from functools import cache

import pytest

from capacity.engines import Engine
from capacity.engines.command_line import read_command
from tools import feature_accuracy as fa
from tools import memory_holdout as mh


@cache
def _scored() -> tuple[mh.Scored, ...]:
    return tuple(fa.score_reference(fa.load_reference_rows()))


def test_every_feature_row_with_a_command_is_sized_through_the_rules() -> None:
    scored = _scored()
    sized = [s for s in scored if s.skipped is None]
    assert {f for s in sized for f in s.case.features} >= {
        mh.Feature.KV_OFFLOAD,
        mh.Feature.EXPERT_PARALLEL,
        mh.Feature.DP_ATTENTION,
    }
    for s in sized:
        assert s.estimate is not None, f"{s.case.id}: capplan refused: {s.error}"
        notes = " ".join(s.estimate["notes"])
        if mh.Feature.KV_OFFLOAD in s.case.features:  # LMCache sized by its rule, not "a KV connector of unknown kind"
            assert "LMCache (LMCacheConnectorV1)" in notes and not s.estimate["not_modelled"], s.case.id
        if mh.Feature.EXPERT_PARALLEL in s.case.features:
            assert "experts split whole over EP 8" in notes, s.case.id
        if mh.Feature.DP_ATTENTION in s.case.features:
            assert "8 attention DP rank(s) of attention TP 1" in notes, s.case.id
    # a row left unsized says why (the catalog lacks its checkpoint or GPU)
    assert all(s.skipped for s in scored if not s.case.command)


def test_dp_ep_row_per_rank_kv_bytes_match_vllms_printed_need() -> None:
    """vLLM: 62.00 GiB for 262,144 tokens; by hand 62 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 253,952 B."""
    (row,) = [s for s in _scored() if s.case.id == "recipes12-qwen3-coder-480b-fp8-h20-dp8-util090"]
    assert row.estimate is not None
    by_hand = 62 * 8 * 128 * 2 * 2
    assert row.estimate["kv_bytes_per_token_per_gpu"] == by_hand
    assert by_hand * 262_144 == round(62.00 * 2**30)
    assert row.estimate["starts"] is False  # the engine refused: 62.00 GiB needed, 48.66 available


def test_ktransformers_flags_are_sized() -> None:
    """SGLang keeps only --kt-num-gpu-experts experts per layer on the GPU once --kt-weight-path is set: the flags
    are applied (features.offload.ExpertOffload), the public log's row is within 1 % (tests/test_feature_offload.py)."""
    command = read_command(
        "python -m sglang.launch_server --model Qwen/Qwen3-30B-A3B --kt-method AMXINT8 --kt-weight-path /w"
        " --kt-num-gpu-experts 32 --kt-cpuinfer 48"
    )
    assert {"--kt-weight-path", "--kt-num-gpu-experts", "--kt-method"} <= set(command.applied)
    assert not command.unsized
    assert "--kt-cpuinfer" in command.ignored  # CPU threads: no GPU memory
    (row,) = [s for s in _scored() if s.case.id == "unresolved-sglang-kt-qwen3-30b-a3b-cpu-experts-h100-tp1"]
    assert row.estimate is not None and abs(row.estimate["kv_budget_bytes_per_gpu"] / 2**30 / 50.28 - 1) < 0.01


@pytest.mark.parametrize(
    ("engine", "version", "generation", "on"),
    [
        (Engine.VLLM, "0.7.3", "v1", False),  # V1 became the default engine in 0.8.0
        (Engine.VLLM, "0.8.0", "v1", True),
        (Engine.VLLM, None, "v0", False),
        (Engine.VLLM, None, "v1", True),
        (Engine.SGLANG, None, None, True),  # the radix cache is on unless --disable-radix-cache
        (Engine.TRTLLM, "1.0", None, False),
    ],
)
def test_prefix_caching_default(engine: Engine, version: str | None, generation: str | None, on: bool) -> None:
    assert fa.prefix_default_on(engine, version, generation) is on


def test_explicit_prefix_caching_is_read_from_the_command_not_the_printed_config() -> None:
    assert fa._explicit({"log_excerpt": "... enable_prefix_caching=True, chunked_prefill_enabled=True"}) is None
    assert fa._explicit({"command": "vllm serve m --enable-prefix-caching"}) is True
    assert fa._explicit({"log_excerpt": "non-default args: {'enable_prefix_caching': True}"}) is True
    assert fa._explicit({"enable_prefix_caching": False}) is False


def test_report_prints_every_feature_in_and_out_of_sample() -> None:
    lines: list[str] = []
    blind = mh.score(mh.load_cases(mh.FEATURE_LOGS_DIR))
    empty = fa.PrefixGroups((), (), (), ())
    fa.report(_scored(), blind, (empty, empty), rows=True, emit=lines.append)
    text = "\n".join(lines)
    for feature in mh.Feature:
        assert any(line.startswith(str(feature)) for line in lines), feature
    assert "IN-SAMPLE" in text and "OUT-OF-SAMPLE" in text and "prefix caching on (default)" in text
    assert "vllm21348-qwen3-235b-a22b-fp8-h100-tp4" in text


def test_the_reference_study_sizes_the_feature_rows_through_the_rules() -> None:
    """evaluation/measurements.compare (vllm_accuracy, overhead_cv) takes the row's features, not a skip."""
    from capacity.features.offload import LMCacheOffload
    from evaluation.measurements import compare, deployment_for, feature_deployment, load_measurements
    from models_registry.sources.gpu_catalog import find_gpu_sku
    from tools.vllm_accuracy import resolve_model

    rows = {r.id: r for r in load_measurements()}
    dp_ids = ("recipes12-qwen3-coder-480b-fp8-h20-dp8-util090", "recipes12-qwen3-coder-480b-fp8-h20-dp8-util095")
    chosen = [rows[i] for i in dp_ids]
    compared = {c.row.id: c for c in compare(chosen, resolve_model, find_gpu_sku, dp_rows=True)}
    assert all(c.skipped for c in compare(chosen, resolve_model, find_gpu_sku))  # the overhead study: one rank's terms
    for row_id in dp_ids:
        predicted = compared[row_id].predicted
        assert predicted is not None, compared[row_id].skipped
        assert predicted.kv_bytes_per_token_per_gpu == 62 * 8 * 128 * 2 * 2  # every KV head on each DP rank
    lmcache = rows["vllm21348-qwen3-235b-a22b-fp8-h100-tp4"]
    spec, _ = resolve_model(lmcache.config_repo)
    deployment = feature_deployment(lmcache, deployment_for(lmcache, spec))
    assert isinstance(deployment.kv_offload, LMCacheOffload) and deployment.tp == 4 and deployment.dp == 1
