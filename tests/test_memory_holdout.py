"""The blind memory holdout (evaluation/data/memory_holdout.yaml): public startup logs from sources the reference
data does not use, scored out of sample and never fitted on (README-memory-holdout.md).

No accuracy threshold here (the set is for measurement). What is checked: every case loads, cites a source and
quotes the log lines, every measured number is copied (it appears in the quoted lines), no source is one the
reference data uses, and the scorer runs on every case the catalog can size.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from capacity.engines import Engine
from models_registry.sources.gpu_catalog import find_gpu_sku
from tools import memory_holdout as mh

DATA = Path(__file__).resolve().parents[1] / "evaluation" / "data"
# the measured fields and how each may be printed in the quote
NUMBER_FIELDS = ("kv_pool_gib", "k_size_gb", "v_size_gb", "kv_tokens", "kv_blocks", "weights_gib")
REFERENCE_FILES = (
    "vllm_public_measurements.yaml",
    "sglang_public_measurements.yaml",
    "trtllm_public_measurements.yaml",
)
_THREAD = re.compile(r"github\.com/[\w.-]+/[\w.-]+/(?:issues|pull|discussions)/\d+")


@pytest.fixture(scope="module", params=[mh.HOLDOUT_PATH, mh.FEATURE_LOGS_DIR], ids=["holdout", "feature_logs"])
def case_path(request: pytest.FixtureRequest) -> Path:
    """The blind holdout, and issue 23's startup logs with a feature on (one file per feature): same rules."""
    return Path(request.param)


@pytest.fixture(scope="module")
def raw(case_path: Path) -> list[dict[str, Any]]:
    return [
        entry
        for file in mh.case_files(case_path)
        for entry in yaml.safe_load(file.read_text(encoding="utf-8"))["cases"]
    ]


@pytest.fixture(scope="module")
def cases(case_path: Path) -> list[mh.Case]:
    return mh.load_cases(case_path)


def _printed_forms(value: object) -> set[str]:
    """How a copied number can appear in a log: as written in the yaml, with thousands separators, or with the
    trailing zeros a float loses in yaml (1.20 -> 1.2)."""
    forms = {str(value)}
    if isinstance(value, int):
        forms.add(f"{value:,}")
    return forms


def test_every_case_loads_with_a_unique_id(raw: list[dict[str, Any]], cases: list[mh.Case]) -> None:
    assert len(cases) == len(raw) > 0
    counts = Counter(c.id for c in cases)
    assert [key for key, n in counts.items() if n > 1] == []


def test_every_case_has_a_source_and_quoted_lines(cases: list[mh.Case]) -> None:
    for case in cases:
        assert case.source.startswith(("https://", "unresolved")), case.id
        assert case.source_group.strip(), case.id
        assert len(case.quote.strip().splitlines()) >= 1, case.id
        assert case.classes, case.id


def test_every_measured_number_appears_in_its_quote(raw: list[dict[str, Any]]) -> None:
    """Numbers are copied from the log, not derived: each one is printed in the quoted lines."""
    for entry in raw:
        measured = entry["measured"]
        numbers = {name: measured[name] for name in NUMBER_FIELDS if measured.get(name) is not None}
        assert numbers or measured["outcome"] == "refused", entry["id"]
        for name, value in numbers.items():
            assert any(form in entry["quote"] for form in _printed_forms(value)), (entry["id"], name, value)
        if measured.get("refusal"):
            assert measured["refusal"] in entry["quote"], entry["id"]


def test_a_quote_is_not_a_copy_of_a_number_from_elsewhere(raw: list[dict[str, Any]]) -> None:
    """The check above can fail: a number the quote does not print is caught (guards the helper itself)."""
    entry = dict(raw[0])
    assert not any(form in entry["quote"] for form in _printed_forms(123456789))


def test_no_source_is_used_by_the_reference_data(cases: list[mh.Case]) -> None:
    reference = "\n".join((DATA / name).read_text(encoding="utf-8") for name in REFERENCE_FILES)
    used_threads = set(_THREAD.findall(reference))
    used_urls = set(re.findall(r"https?://\S+", reference))
    for case in cases:
        if case.source.startswith("https://"):
            thread = _THREAD.search(case.source)
            assert thread is None or thread.group(0) not in used_threads, case.id
            assert case.source not in used_urls, case.id


def test_no_log_is_already_in_the_reference_data(raw: list[dict[str, Any]]) -> None:
    """Sources the reference data cites only as an unresolved file have no URL to compare: a printed token or block
    count (five digits or more) that the reference files also hold marks the same log."""
    reference = "\n".join((DATA / name).read_text(encoding="utf-8") for name in REFERENCE_FILES)
    for entry in raw:
        for name in ("kv_tokens", "kv_blocks"):
            value = entry["measured"].get(name)
            if value is not None and value >= 10_000:
                assert not any(re.search(rf"\b{re.escape(f)}\b", reference) for f in _printed_forms(value)), (
                    entry["id"],
                    value,
                )


def test_catalog_ids_resolve(cases: list[mh.Case]) -> None:
    """A case the scorer sizes names a catalog GPU (an unknown id would be a silent skip)."""
    for case in cases:
        if case.gpu is not None:
            assert find_gpu_sku(case.gpu).id == case.gpu, case.id


def test_the_scorer_runs_on_every_case(cases: list[mh.Case]) -> None:
    scored = mh.score(cases)
    assert [s.case.id for s in scored] == [c.id for c in cases]
    sized = [s for s in scored if s.skipped is None]
    assert sized, "no case is sized"
    for s in sized:
        # every sized case gets capplan's answer or its one-line refusal, and a start decision
        assert s.estimate is not None or s.error, s.case.id
        assert s.start_right is not None, s.case.id
    lines: list[str] = []
    mh.report(scored, rows=True, emit=lines.append)
    assert lines[0].startswith(f"{len(cases)} cases")
    assert any(line.startswith("overall") for line in lines)


def test_an_sglang_pool_capped_by_max_total_tokens_is_scored_on_what_it_allocated() -> None:
    """SGLang prints the pool it allocated; with --max-total-tokens 20480 that is 20,480 tokens' bytes, not the budget.
    Hand derivation from SGLang's docs-CI log (feature_logs/speculative.yaml, Llama-3.1-8B in fp16): 32 layers x 8 KV
    heads x 128 x 2 (K, V) x 2 bytes = 131,072 B a token, x 20,480 = 2.50 GiB, the printed "K size: 1.25 GB, V size:
    1.25 GB". vLLM prints its budget ("Available KV cache memory"), so a vLLM case keeps the budget."""
    case = next(c for c in mh.load_cases(mh.FEATURE_LOGS_DIR) if c.id == "sglang-docs-spec-llama31-8b-eagle3-h100")
    token_bytes = 32 * 8 * 128 * 2 * 2
    estimate = {"kv_budget_bytes_per_gpu": 29 * 2**30, "physical_kv_token_slots": 20480}
    scored = mh.Scored(case, {**estimate, "kv_bytes_per_token_per_gpu": token_bytes})
    assert scored.predicted_pool_bytes == 20480 * token_bytes == case.measured.kv_pool_bytes
    assert scored.pool_error == 0
    as_vllm = mh.Scored(replace(case, engine=Engine.VLLM), {**estimate, "kv_bytes_per_token_per_gpu": token_bytes})
    assert as_vllm.predicted_pool_bytes == 29 * 2**30


def test_the_readme_quotes_the_blind_figures_the_scorer_prints() -> None:
    """The README's memory-holdout sentence is what `tools/memory_holdout.py` computes today: a rule change that
    moves the blind figures fails here until the README says so."""
    summary = mh.Summary.of(s for s in mh.score(mh.load_cases()) if s.skipped is None)
    readme = " ".join((Path(mh.__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())

    def quoted(errors: tuple[float, ...]) -> str:
        within = sum(abs(e) <= mh.WITHIN for e in errors)
        median = sorted(abs(e) for e in errors)
        middle = len(median) // 2
        value = median[middle] if len(median) % 2 else (median[middle - 1] + median[middle]) / 2
        return f"{within} of {len(errors)} scored cases (median {value:.2%}".replace("%", " %")

    assert f"pool within 5 % on {quoted(summary.pool)})" in readme
    tokens = quoted(summary.tokens).replace(" scored cases (median ", " (")
    assert f"printed KV tokens on {tokens})" in readme
    assert f"start or refusal right on {summary.starts_right} of {summary.starts_scored}" in readme
