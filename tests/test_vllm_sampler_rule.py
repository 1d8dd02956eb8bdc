"""The sampler term of vLLM's profiling run: a rule per release read off the code, not a fit.

Expected numbers come from the engine's code, step by step in evaluation/data/README-sampler.md (the vLLM
wheels 0.8.5-0.33.0: v1/worker/gpu_model_runner.py `_dummy_sampler_run`, v1/sample/sampler.py,
v1/sample/ops/topk_topp_sampler.py and topk_topp_triton.py, the V2 runner's v1/worker/gpu/sample/; PyTorch's
aten/src/ATen/native/cuda/SortStable.cu for the CUDA sort's scratch), from a public startup log, and, under
the engine_oracle marker, from running the release's own sampler code on the CPU with every live tensor
counted (tools/engine_oracle/vllm_sampler_peak.py). Never from what capplan printed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from capacity import engine_constants as ec
from capacity.dtypes import GIB
from capacity.engines.vllm.overhead import profiling_buffers, runs_v2_model_runner, sampler_units
from evaluation.measurements import load_measurements
from models_registry.resolve import load_model
from tests.conftest import ORACLE_PYTHON, ROOT, require_oracle_venv

RUNNER = ROOT / "tools" / "engine_oracle" / "vllm_sampler_peak.py"
# unpacked older wheels (pip download vllm==X --no-deps; unzip vllm/v1/sample/* vllm/v1/worker/* vllm/envs.py):
# one folder per version under this path; optional (the installed 0.33.0 is always measured)
OLDER_WHEELS = os.environ.get("VLLM_SAMPLER_WHEELS")


def _rule(version: str, v2_runner: bool = False) -> ec.VllmSamplerRule:
    rule = ec.vllm_sampler_rule(version, v2_runner)
    assert rule is not None
    return rule


def test_rules_by_release() -> None:
    # V0: the profiling run's one execute_model samples too (its own phase); not read before 0.4.3
    assert [_rule(v).version for v in ("0.2.7", "0.3.3", "0.4.3", "0.5.4", "0.5.5", "0.6.1", "0.6.2", "0.7.3")] \
        == ["0.2.7", "0.3.3", "0.3.3", "0.3.3", "0.5.5", "0.5.5", "0.6.2", "0.6.2"]  # fmt: skip
    assert ec.vllm_sampler_rule("0.2.6") is None
    assert [_rule(v).version for v in ("0.8.5", "0.10.1.1", "0.11.0", "0.11.1", "0.15.1", "0.19.0", "0.24", "0.33")] \
        == ["0.8", "0.9", "0.9", "0.11.1", "0.11.1", "0.17", "0.21", "0.30"]  # fmt: skip
    # the V2 model runner's own dummy run: the default pass from 0.22, the warmup-param pass too from 0.33
    assert [_rule(v, v2_runner=True).version for v in ("0.22.0", "0.25.0", "0.26.0", "0.32.0", "0.33.0")] \
        == ["0.22", "0.22", "0.26", "0.26", "0.33"]  # fmt: skip
    assert ec.vllm_sampler_rule("0.21.0", v2_runner=True) is None  # no V2 runner by default yet (opt-in)


def test_which_models_run_the_v2_model_runner() -> None:
    """`VllmConfig.use_v2_model_runner` with VLLM_USE_V2_MODEL_RUNNER unset, as each wheel's config/vllm.py
    reads: 0.22 Qwen3 dense unquantized; 0.23 + Llama / Mistral; 0.24 the list, quantized or MoE too;
    0.25-0.26 any dense non-hybrid model or a listed MoE; 0.27-0.28 a listed hybrid too; 0.29 every model."""
    llama, qwen3 = load_model("meta-llama/Llama-3.1-8B-Instruct").spec, load_model("Qwen/Qwen3-14B").spec
    awq, moe = load_model("Qwen/Qwen3-14B-AWQ").spec, load_model("Qwen/Qwen3-30B-A3B").spec
    listed_moe, hybrid = load_model("Qwen/Qwen1.5-MoE-A2.7B").spec, load_model("Qwen/Qwen3-Next-80B-A3B-Instruct").spec
    gemma = load_model("google/gemma-3-27b-it").spec  # Gemma3ForConditionalGeneration, never listed
    table = {
        "0.21.0": (False, False, False, False, False, False, False),
        "0.22.0": (False, True, False, False, False, False, False),
        "0.23.0": (True, True, False, False, False, False, False),
        "0.24.0": (True, True, True, False, True, False, False),
        "0.26.0": (True, True, True, False, True, False, True),
        "0.28.0": (True, True, True, False, True, False, True),
        "0.29.0": (True, True, True, True, True, True, True),
    }
    for version, expected in table.items():
        got = tuple(runs_v2_model_runner(m, version) for m in (llama, qwen3, awq, moe, listed_moe, hybrid, gemma))
        assert got == expected, version


def test_v2_default_pass_keeps_only_the_model_dtype_logits() -> None:
    """0.22-0.32 V2 runner: the dummy batch adds no request, so `apply_sampling_params` returns the logits as
    they are (no fp32 copy) and no top-k/top-p runs; the penalties' bins are held from load."""
    spec = load_model("meta-llama/Llama-3.1-8B-Instruct").spec  # vocab 128,256
    vocab, s = 128_256, 1024
    assert sampler_units(_rule("0.28.0", v2_runner=True), s, sm_count=132) == (0.0, 0)
    v2 = profiling_buffers(spec, 1, 1, 8192, s, 2, version="0.28.0", sm_count=132)
    assert v2.sampler_phase_bytes == s * vocab * 2
    assert v2.sampler_bins_bytes == s * vocab * 4 + s * -(-vocab // 32) * 4
    v1 = profiling_buffers(spec, 1, 1, 8192, s, 2, version="0.22.0", sm_count=132)  # Llama joins the list at 0.23
    assert v1.sampler_phase_bytes == s * vocab * 2 + 3 * s * vocab * 4 + 132 * vocab * 4 and not v1.sampler_bins_bytes
    # 0.22-0.25: apply_sampling_params copies the logits to fp32 whatever the parameters (one copy)
    for version in ("0.23.0", "0.25.0"):
        early = profiling_buffers(spec, 1, 1, 8192, s, 2, version=version, sm_count=132)
        assert early.sampler_phase_bytes == s * vocab * 2 + s * vocab * 4, version


def test_torch_sort_path_with_its_cuda_scratch() -> None:
    # to 0.16 at 1,024 rows: tensors alive while torch.sort runs = fp32 cast (1) + values (1) + int64 indices (2);
    # segmented_sort_pairs (>= 128 rows) adds int64 iota indices (2) + cub's third keys (1) and values (2):
    # 4 + 5 = 9 > the 6.5 alive later at the scatter
    for version in ("0.8.5", "0.10.1.1", "0.15.1"):
        assert sampler_units(_rule(version), 1024) == (9.0, 0)
        assert sampler_units(_rule(version), 1) == (9.0, 0)  # segmented_sort_large_segments: the same 5
    # 2-127 rows, segmented_sort_pairs_by_full_sort: two int2 buffers (2 + 2), the keys output (1), cub's third
    # keys (1) and int2 values (2): 4 + 8 = 12
    assert sampler_units(_rule("0.15.1"), 64) == (12.0, 0)
    assert sampler_units(_rule("0.19.0"), 4) == (12.0, 0)  # 0.17-0.28 below 8 rows: the torch path again


def test_triton_path_and_its_buffer() -> None:
    # 0.17+: fp32 cast, softmax, exponential draws (3) + the cached buffer of min(next_pow2(min(SMs, S)), SMs) rows
    assert sampler_units(_rule("0.19.0"), 1024, sm_count=132) == (3.0, 132)
    assert sampler_units(_rule("0.19.0"), 100, sm_count=132) == (3.0, 128)
    assert sampler_units(_rule("0.19.0"), 1024, sm_count=58) == (3.0, 58)  # L4
    assert sampler_units(_rule("0.19.0"), 1024) == (3.0, ec.VLLM_ASSUMED_SM_COUNT)
    assert sampler_units(_rule("0.30.0"), 4, sm_count=132) == (3.0, 4)  # Triton at any size from 0.30


def test_flashinfer_switch_per_release() -> None:
    # 0.9-0.11.0: FlashInfer when installed (not a pip dependency): off by default, 3 when stated on
    assert sampler_units(_rule("0.10.1.1"), 256) == (9.0, 0)
    assert sampler_units(_rule("0.10.1.1"), 256, flashinfer=True) == (3.0, 0)
    # 0.11.1-0.20: opt-in (`if envs.VLLM_USE_FLASHINFER_SAMPLER:`, vllm#26859), though 0.11.1 and 0.11.2 require
    # flashinfer-python: installed is not on
    assert sampler_units(_rule("0.11.1"), 256) == (9.0, 0)
    assert sampler_units(_rule("0.11.2"), 256, flashinfer=True) == (3.0, 0)
    assert sampler_units(_rule("0.15.1"), 256) == (9.0, 0)
    # 0.21+: on by default, but the dummy run warms forward_native too: the larger call is the native one
    assert sampler_units(_rule("0.24.0"), 256, sm_count=132) == (3.0, 132)
    assert sampler_units(_rule("0.24.0"), 4, sm_count=132) == (12.0, 0)
    # 0.33 V2 runner: FlashInfer (3) by default; off: the fp32 copy (1) + the Triton buffer
    assert sampler_units(_rule("0.33.0", v2_runner=True), 1024, sm_count=132) == (3.0, 0)
    assert sampler_units(_rule("0.33.0", v2_runner=True), 1024, sm_count=132, flashinfer=False) == (1.0, 132)


def test_sampler_bytes_in_the_profiling_buffers() -> None:
    spec = load_model("Qwen/Qwen3-32B").spec  # vocab 151,936
    vocab, s = 151_936, 256
    b = profiling_buffers(spec, 1, 1, 8192, s, 2, version="0.19.0", sm_count=132)
    assert b.sampler_phase_bytes == s * vocab * 2 + 3 * s * vocab * 4 + 132 * vocab * 4
    assert b.sampler_bins_bytes == 0
    v2 = profiling_buffers(spec, 1, 1, 8192, s, 2, version="0.33.0")
    assert v2.sampler_bins_bytes == s * vocab * 4 + s * -(-vocab // 32) * 4
    # V0 0.6.2-0.7.3: the bf16 logits + the sort's peak, 9 fp32 copies at 128+ rows (as V1 0.8)
    v0 = profiling_buffers(spec, 1, 1, 8192, s, 2, version="0.7.3")
    assert v0.sampler_phase_bytes == s * vocab * 2 + 9 * s * vocab * 4
    assert profiling_buffers(spec, 1, 1, 8192, s, 2, version="0.2.6").sampler_phase_bytes == 0  # not read


def test_v0_sampler_units_by_release() -> None:
    """Hand derivations from the V0 wheels' model_executor/layers/sampler.py (Sampler.forward, _apply_top_k_top_p),
    in fp32 logits units on top of the model-dtype logits, rows >= 128 unless said (scratch 4 + k, else 6 + 2k).
    0.3.3-0.5.4 sort the model-dtype logits (keys k = 0.5 for bf16): at the sort k + 2 indices + scratch 4.5 = 7;
    after it 2 + 0.5 masks + 2 inverse indices + 4 model-dtype tensors (2) = 6.5. 0.5.5-0.6.1 cast to fp32: the sort
    1 + 1 + 2 + 5 = 9, the gather re-sort 1 + 1 + 2 + 0.5 + 1 + 1 + 2 + 1 = 9.5. 0.6.2+ scatter: 7.5 < the sort's 9.
    An fp32 model: `.to(torch.float)` copies nothing (one unit less). The tensor counts after the sort are also
    measured by running each wheel's own function (tools/engine_oracle/vllm_v0_sampler_peak.py, README-sampler.md)."""
    assert sampler_units(_rule("0.5.0"), 256) == (7.0, 0)
    assert sampler_units(_rule("0.5.0"), 256, model_dtype_bytes=4) == (8.5, 0)  # fp32 model: 4.5 + 4 > 3 + 5
    assert sampler_units(_rule("0.5.0"), 64) == (2.5 + 7.0, 0)  # 2-127 rows: scratch 6 + 2 x 0.5
    assert sampler_units(_rule("0.2.7"), 256) == (7.0, 0)  # after the sort 4.75 + 2 = 6.75 < the sort's 7
    assert sampler_units(_rule("0.2.7"), 256, model_dtype_bytes=4) == (8.75, 0)
    assert sampler_units(_rule("0.6.1"), 256) == (9.5, 0)
    assert sampler_units(_rule("0.6.1"), 256, model_dtype_bytes=4) == (8.5, 0)  # no cast: 8.5 > 3 + 5
    assert sampler_units(_rule("0.6.4"), 256) == (9.0, 0)
    assert sampler_units(_rule("0.6.4"), 256, model_dtype_bytes=4) == (8.0, 0)  # the sort without the cast: 3 + 5
    assert sampler_units(_rule("0.6.4"), 64) == (12.0, 0)


def test_sort_path_against_a_public_log() -> None:
    """Qwen3-32B on an H100 before 0.17 (llm-d-benchmark summary; the planner blog's 0.15/0.16 value): the
    profiling activation peak printed 5.64 GiB, where the sampler phase (1,024 rows: bf16 logits + 9 fp32
    copies = 5.51 GiB) is far above the forward phase; the rule lands within 3 % of the log."""
    row = next(r for r in load_measurements() if r.id == "llmd-bench-qwen3-32b-h100-tp1-16000")
    assert row.activation_peak_gib == 5.64
    vocab, s = 151_936, 1024
    phase_gib = (s * vocab * 2 + 9 * s * vocab * 4) / GIB
    assert abs(phase_gib - row.activation_peak_gib) / row.activation_peak_gib < 0.03
    b = profiling_buffers(load_model("Qwen/Qwen3-32B").spec, 1, 1, 8192, s, 2, version="0.15.1")
    assert b.sampler_phase_bytes / GIB == pytest.approx(phase_gib)


def _oracle(case: dict[str, object]) -> Any:
    done = subprocess.run([str(ORACLE_PYTHON), str(RUNNER), json.dumps(case)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _units(measured: dict[str, Any], rows: int, vocab: int, buffer_rows: int) -> float:
    """The oracle's peak in fp32 logits units, less the Triton buffer and the per-request scalars (< 0.01)."""
    units = float(measured["fp32_units"]) - buffer_rows / rows
    return round(units, 2)


@pytest.mark.engine_oracle
def test_installed_release_sampler_peak_equals_the_rule() -> None:
    """vLLM 0.33.0's V1 runner `_dummy_sampler_run` run as shipped: with the Triton top-k/top-p (kernels
    stubbed, their allocations kept) the peak is 3 fp32 copies + the buffer, the rule from 0.30 (the V1 runner
    has the same sampler code as 0.30); the torch-sort path's tensors are the 0.17-0.28 small-batch figure."""
    require_oracle_venv()
    vocab, sizes = 32_000, ((64, 20), (100, 132), (4, 132))
    runs = _oracle({"vocab": vocab, "triton": True, "cases": [{"num_reqs": r, "num_sm": m} for r, m in sizes]})
    assert isinstance(runs, list)
    for (rows, sms), measured in zip(sizes, runs, strict=True):
        units, buffer_rows = sampler_units(_rule("0.30.0"), rows, sm_count=sms)
        assert measured["vllm_version"] == "0.33.0"
        assert _units(measured, rows, vocab, buffer_rows) == units, (rows, sms, measured["live_at_peak"])
    torch_path = _oracle({"num_reqs": 64, "vocab": vocab})
    assert isinstance(torch_path, dict)
    assert _units(torch_path, 64, vocab, 0) == _rule("0.21.0").small_batch_units


def _older() -> list[str]:
    assert OLDER_WHEELS is not None
    return sorted(p.name for p in Path(OLDER_WHEELS).iterdir() if (p / "vllm/v1/sample/sampler.py").exists())


if OLDER_WHEELS:  # collected only where unpacked older wheels are named (how: evaluation/data/README-sampler.md)

    @pytest.mark.engine_oracle
    @pytest.mark.parametrize("version", _older())
    def test_older_release_sampler_tensors_equal_the_rule(version: str) -> None:
        """Each older release's own sampler code (its files loaded over the installed package): the tensor-level
        peak of the native path is the rule's (the CUDA sort's scratch is below the dispatcher, added by rule)."""
        require_oracle_venv()
        assert OLDER_WHEELS is not None
        rule, vocab, rows = _rule(version), 32_000, 64
        source = str(Path(OLDER_WHEELS) / version)
        triton = rule.triton_min_rows is not None
        measured = _oracle({"num_reqs": rows, "vocab": vocab, "source": source, "triton": triton, "num_sm": 20})
        below = triton and rows < (rule.triton_min_rows or 0)
        expected = rule.small_batch_units if below else rule.native_units
        assert _units(measured, rows, vocab, 20 if triton and not below else 0) == expected


def test_v0_multimodal_profile_prompts() -> None:
    """V0's profile_run (0.6.4, 0.7.3 wheels): max_num_seqs = min(max_num_seqs, max_num_batched_tokens //
    get_max_multimodal_tokens), at least 1; the registry's tokens are each modality's largest item x its limit
    (V0's default limit 1). Qwen2.5-VL's largest image alone is 12,845,056 / (28 x 28) = 16,384 tokens, above an
    8,192-token batch: one dummy prompt, so one sampled row, where a text model samples 256."""
    from capacity.engines.vllm.overhead import OverheadInputs, inputs_buffers, v0_multimodal_profile_seqs

    vl = load_model("Qwen/Qwen2.5-VL-7B-Instruct").spec
    assert vl.vision is not None
    assert v0_multimodal_profile_seqs(256, 8192, vl.vision, 8192, {}, "0.7.3") == 1
    assert v0_multimodal_profile_seqs(256, 8192, vl.vision, 8192, {"image": 0, "video": 0}, "0.7.3") == 256
    vocab = vl.vocab_size
    v0 = inputs_buffers(OverheadInputs(vl, 1, 1, 8192, 256, 2), "0.7.3")
    assert v0.sampler_phase_bytes == 1 * vocab * 2 + 9 * 1 * vocab * 4  # 1 row: the sort 4 + its scratch 5
    text = inputs_buffers(OverheadInputs(vl, 1, 1, 8192, 256, 2, mm_text_only=True), "0.7.3")
    assert text.sampler_phase_bytes == 256 * vocab * 2 + 9 * 256 * vocab * 4
