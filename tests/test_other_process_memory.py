"""Other processes' memory at start (`--other-process-gib`) and unified-memory GPUs, per engine and release.

Oracles, none of them capplan's:
- vLLM 0.33.0's own code (`tools/engine_oracle/vllm_memory_oracle.py`, in the oracle venv, on CPU): its
  `MemorySnapshot`, `request_memory`, `memory_profiling` and the budget line of `determine_available_memory`
  on a simulated device (only what torch and psutil report is set by the test);
- public start refusals of vLLM on DGX Spark (GB10), the numbers as the engine printed them;
- hand derivations from the source of the releases the oracle venv does not hold (vLLM 0.4-0.9 wheels,
  SGLang 0.5.23's `_profile_available_bytes`, TensorRT-LLM's `KvCacheCreator`), each quoted where used.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from capacity.engines.registry import engine_profile
from models_registry.sources.gpu_catalog import find_gpu_sku
from pipelines.cli import app
from tests.conftest import ORACLE_PYTHON, ROOT, require_oracle_venv, run_sglang_in_oracle_venv
from tests.test_engine_sglang import _ORACLE_SCRIPT as _sglang_oracle
from tests.test_telemetry_support import gib, ingest, only_observation

GIB = 1 << 30
RUNNER = ROOT / "tools" / "engine_oracle" / "vllm_memory_oracle.py"
MARKER = "@@vllm-memory@@ "
WEIGHTS, ACTIVATION, NON_TORCH = 16 * GIB, 2 * GIB + 12345, 300 * (1 << 20)


def _cases() -> list[dict[str, Any]]:
    """Discrete (H100's catalog total) and unified (GB10's) devices x utilizations x others' memory."""
    cases = []
    for gpu in ("h100-sxm-80gb", "gb10-128gb"):
        total = find_gpu_sku(gpu).memory_total_bytes
        integrated = gpu.startswith("gb10")
        for utilization in (0.5, 0.8, 0.9, 0.92, 0.95):
            for other_gib in (0, 2, 7.5, 20, 40):
                other = round(other_gib * GIB)
                cases.append(
                    {
                        "id": f"{gpu}/{utilization}/{other_gib}",
                        "total_bytes": total,
                        "utilization": utilization,
                        # capplan's "others" is everything not free at the engine's snapshot: the test's CUDA
                        # context is folded into it (context 0 here), as a user reads it off nvidia-smi
                        "other_bytes": 0 if integrated else other,
                        "context_bytes": 0,
                        "weights_bytes": WEIGHTS,
                        "activation_bytes": ACTIVATION,
                        "non_torch_bytes": NON_TORCH,
                        # on an integrated device vLLM reads the host's available memory, not cudaMemGetInfo's free
                        "integrated": integrated,
                        "host_available_bytes": total - other,
                        "capplan_other": other,
                    }
                )
    return cases


def run_vllm_memory_oracle(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """vLLM 0.33.0's own start check and budget (tools/engine_oracle/vllm_memory_oracle.py) on each simulated
    device, by case id (skips where the oracle venv is missing)."""
    require_oracle_venv()
    proc = subprocess.run(
        [str(ORACLE_PYTHON), str(RUNNER)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARKER)]
    assert proc.returncode == 0 and lines, (proc.stderr or proc.stdout)[-2000:]
    answer = json.loads(lines[-1][len(MARKER) :])
    assert answer["vllm_version"] == "0.33.0"
    return {case["id"]: case for case in answer["cases"]}


@pytest.fixture(scope="module")
def vllm_memory() -> dict[str, dict[str, Any]]:
    return run_vllm_memory_oracle(_cases())


@pytest.mark.engine_oracle
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_vllm_033_start_check_and_budget_against_its_own_code(
    case: dict[str, Any], vllm_memory: dict[str, dict[str, Any]]
) -> None:
    vllm = vllm_memory[case["id"]]
    profile = engine_profile("vllm", "0.33")
    total, util, other = case["total_bytes"], case["utilization"], case["capplan_other"]
    problem = profile.start_memory_problem(total, util, other)
    if "error" in vllm:
        assert problem == f"vLLM refuses to start: {vllm['error']}"
        return
    assert problem is None
    budget = profile.kv_budget(total, util, WEIGHTS, ACTIVATION + NON_TORCH, other)
    # vLLM 0.33 requests ceil(total x util), capplan truncates: at most one byte apart, and others' memory
    # moves neither (a per-instance budget)
    assert abs(budget - vllm["available_kv_bytes"]) <= 1
    assert budget == profile.kv_budget(total, util, WEIGHTS, ACTIVATION + NON_TORCH, 0)
    unshared = vllm_memory[case["id"].rsplit("/", 1)[0] + "/0"]
    assert vllm["available_kv_bytes"] == unshared["available_kv_bytes"]


# vLLM start refusals on DGX Spark as public logs print them: (free GiB, utilization, requested GiB). The
# total they print, 121.69 GiB, is the catalog's GB10 entry. MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47
# (0.87 wants 105.87 GiB); the rest from DGX Spark notes quoted in public repositories.
SPARK_REFUSALS = [
    (97.07, 0.8, 97.35),
    (99.33, 0.87, 105.87),
    (104.46, 0.87, 105.87),
    (103.02, 0.88, 107.09),
    (109.53, 0.91, 110.74),
    (52.37, 0.5, 60.85),
]


@pytest.mark.parametrize(("free_gib", "utilization", "requested_gib"), SPARK_REFUSALS)
def test_public_dgx_spark_refusals(free_gib: float, utilization: float, requested_gib: float) -> None:
    total = find_gpu_sku("DGX Spark").memory_total_bytes
    other = total - round(free_gib * GIB)
    problem = engine_profile("vllm", "0.33").start_memory_problem(total, utilization, other)
    assert problem is not None
    assert (
        f"({free_gib}/121.69 GiB) on startup is less than desired GPU memory utilization "
        f"({utilization}, {requested_gib} GiB)"
    ) in problem


def test_a_public_dgx_spark_start_at_06_starts() -> None:
    # "Free memory on device (114.54/121.69 GiB) on startup. Desired GPU memory utilization is (0.6, 73.01 GiB)"
    # (a Qwen3-0.6B run that started: vLLM's post-start line, public DGX Spark notes)
    total = find_gpu_sku("gb10-128gb").memory_total_bytes
    assert engine_profile("vllm", "0.33").start_memory_problem(total, 0.6, total - round(114.54 * GIB)) is None


# vLLM by release, derived by hand from each wheel's worker (T total, u utilization, O others' memory at
# init, W weights, A activation peak, N non-torch, C own context):
# - 0.4.0.post1-0.6.3 `worker.py`: init_gpu_memory = mem_get_info()[0] at init (T - O - C); after profiling
#   peak_memory = init_gpu_memory - free = W + A + N; blocks from T x u - peak_memory: O is not charged.
# - 0.6.4 `worker.py` and 0.8.0-0.9.0 `v1/worker/gpu_worker.py`: peak_memory = torch peak (W + A) +
#   non_torch_allocations (mem_get_info total - free - torch allocated = O + C + N): O comes off in full.
# - 0.6.5-0.7.3 `worker.py`: memory_profiling(baseline = total - init_gpu_memory): O in the baseline, not charged.
# - 0.9.1+ `gpu_worker.py`: init_snapshot, `memory_profiling(self.init_snapshot)`, and the start check
#   `if self.init_snapshot.free_memory < self.requested_memory: raise ValueError(...)`.
RELEASES = [
    ("0.4.0", False, False),
    ("0.6.3", False, False),
    ("0.6.4", True, False),
    ("0.6.5", False, False),
    ("0.7.3", False, False),
    ("0.8.0", True, False),
    ("0.8.5", True, False),
    ("0.9.0", True, False),
    ("0.9.1", False, True),
    ("0.15.0", False, True),
    ("0.33.0", False, True),
]


@pytest.mark.parametrize(("version", "charged", "checked"), RELEASES)
def test_vllm_releases_by_hand(version: str, charged: bool, checked: bool) -> None:
    profile = engine_profile("vllm", version)
    total, util, other = 80 * GIB, 0.9, 12 * GIB  # 68 GiB free < 72 GiB requested
    budget = profile.kv_budget(total, util, WEIGHTS, NON_TORCH, other)
    assert budget == math.floor(total * util) - WEIGHTS - NON_TORCH - (other if charged else 0)
    assert (profile.start_memory_problem(total, util, other) is not None) is checked
    assert profile.start_memory_problem(total, util, 4 * GIB) is None  # 76 GiB free >= 72 GiB


def test_sglang_takes_others_times_the_fraction() -> None:
    # SGLang 0.5.23 `_profile_available_bytes`: rest = free after the weights - pre_model_load_memory x (1 - f),
    # both read from mem_get_info's free; with O held by others, pre = T - O - C and free after = pre - W - ...,
    # so rest = (T - O - C) x f - W - ...: O x f comes off
    profile = engine_profile("sglang", None)
    total, f, other = 80 * GIB, 0.83, 10 * GIB
    without = profile.kv_budget(total, f, WEIGHTS, NON_TORCH, 0)
    assert without - profile.kv_budget(total, f, WEIGHTS, NON_TORCH, other) == math.floor(other * f)
    assert profile.start_memory_problem(total, f, other) is None


def test_trtllm_takes_others_before_the_fraction() -> None:
    # TensorRT-LLM `_util.py` KvCacheCreator: extra_cost = (total - free) - torch allocated, device-wide, so
    # O is in peak_memory; kv = (total - peak_memory) x free_gpu_memory_fraction
    profile = engine_profile("trtllm", None)
    total, f, other = 80 * GIB, 0.9, 10 * GIB
    expected = math.floor((total - other - WEIGHTS - NON_TORCH) * f)
    assert profile.kv_budget(total, f, WEIGHTS, NON_TORCH, other) == expected


runner = CliRunner()


def _estimate(*args: str) -> Any:
    return runner.invoke(app, ["estimate", "Qwen/Qwen3-8B", "--max-model-len", "8192", *args])


def test_cli_refuses_to_start_with_vllms_message() -> None:
    result = _estimate("--gpu", "h100-sxm-80gb", "--other-process-gib", "10", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["starts"] is False and out["fits"] is False
    assert "is less than desired GPU memory utilization (0.92," in out["reason"]


def test_cli_an_older_release_takes_others_off_the_pool() -> None:
    base = ("--gpu", "h100-sxm-80gb", "--engine-version", "0.8.5", "--json")
    alone = json.loads(_estimate(*base).output)
    shared = json.loads(_estimate(*base, "--other-process-gib", "10").output)
    assert alone["kv_budget_bytes_per_gpu"] - shared["kv_budget_bytes_per_gpu"] == 10 * GIB
    assert shared["starts"] is True


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_cli_rejects_a_bad_amount_in_one_line(value: str) -> None:
    result = _estimate("--gpu", "h100-sxm-80gb", "--other-process-gib", value)
    assert result.exit_code == 2
    assert "--other-process-gib must be a finite number of GiB >= 0" in result.output
    assert "Traceback" not in result.output


def test_unified_memory_gpus() -> None:
    spark = find_gpu_sku("NVIDIA GB10")
    assert spark.unified_memory and spark.gpus_per_node == 1
    assert not any(find_gpu_sku(g).unified_memory for g in ("gh200-96gb", "gb200", "gb300", "h100-sxm-80gb"))
    est_notes = _estimate("--gpu", "gb10", "--json")
    assert any("shares its memory with the host" in note for note in json.loads(est_notes.output)["notes"])


# --- pasted logs: the memory in use at start, as vLLM prints it -------------------------------------------
PREFIX = "vllm serve meta-llama/Llama-3.1-8B-Instruct --gpu-memory-utilization 0.6\n"
PRINTED = (1 << 30) // 100  # the 0.01 GiB vLLM's two decimals can hide, given to the start


def test_a_started_log_states_the_memory_in_use(tmp_path: Path) -> None:
    # vLLM 0.33 gpu_worker.py after the CUDA graphs ("Free memory on device (F/T GiB) on startup. Desired GPU
    # memory utilization is (U, R GiB). ..."); the numbers of a public DGX Spark run
    line = (
        "(EngineCore_DP0 pid=9) INFO 09-18 10:00:00 [gpu_worker.py:452] Free memory on device (114.54/121.69 GiB) "
        "on startup. Desired GPU memory utilization is (0.6, 73.01 GiB). Actual usage is 3.35 GiB for consumed "
        "memory (weights + non-torch), 0.5 GiB for peak activation, and 0.2 GiB for CUDAGraph memory.\n"
    )
    obs = only_observation(ingest(tmp_path, {"d/startup.log": PREFIX + line}))
    assert obs["other_process_bytes"] == gib(121.69) - gib(114.54) - PRINTED
    assert obs["gpu_memory_utilization"] == 0.6 and obs["requested_memory_bytes"] == gib(73.01)


def test_a_refusal_log_states_the_memory_in_use_and_fails(tmp_path: Path) -> None:
    line = (
        "ValueError: Free memory on device cuda:0 (97.07/121.69 GiB) on startup is less than desired GPU memory "
        "utilization (0.8, 97.35 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.\n"
    )
    obs = only_observation(ingest(tmp_path, {"d/startup.log": PREFIX + line}))
    assert obs["startup_outcome"] == "failed"
    assert obs["other_process_bytes"] == gib(121.69) - gib(97.07) - PRINTED
    assert obs["requested_memory_bytes"] == gib(97.35)


def test_the_observed_memory_in_use_reaches_the_prediction() -> None:
    from capacity.calibration import ObservedSettings, observed_deployment
    from capacity.estimate import estimate, pool_starts
    from models_registry.resolve import spec_and_checkpoint

    model, _ = spec_and_checkpoint("Qwen/Qwen3-8B")
    spark = find_gpu_sku("gb10-128gb")
    common = {"engine_version": "0.33.0", "gpu_memory_utilization": 0.8, "max_model_len": 8192}
    refused = observed_deployment(model, ObservedSettings(**common, other_process_bytes=gib(121.69 - 97.07)))
    assert refused.other_process_bytes == gib(121.69 - 97.07)
    refused_estimate = estimate(model, refused, gpu=spark)
    assert not refused_estimate.starts and not pool_starts(refused_estimate)  # placement's check agrees
    started = observed_deployment(model, ObservedSettings(**common, other_process_bytes=gib(121.69 - 114.54)))
    assert estimate(model, started, gpu=spark).starts


# --- SGLang 0.5.23's own `_profile_available_bytes`, with others' memory ------------------------------------
# The header that loads SGLang on CPU (torchvision's CUDA ops kept out) is test_engine_sglang's, reused as is.
_SGLANG_SCRIPT = (
    _sglang_oracle.split("import sglang.srt.arg_groups.memory_hook")[0]
    + r"""
import json
from types import SimpleNamespace as NS
from unittest import mock
from sglang.srt.mem_cache import kv_cache_configurator as kc
GIB = 1 << 30
out = []
for case in json.load(sys.stdin):
    # what mem_get_info would report: free before the weights (pre_model_load_memory) and after them, in GB
    free = case["total"] - case["other"] - case["context"]
    stub = NS(mambaish_config=None, post_capture_kv_active=False, device="cuda", gpu_id=0,
              model_config=NS(is_multimodal=False))
    sched = NS(mem_fraction_static=case["f"], prefill_max_requests=None, max_mamba_cache_size=None)
    graphs = NS(graph=NS(cuda_graph_config=NS(prefill=NS(full_prefill_max_req=None, backend=None))))
    with mock.patch.object(kc, "get_available_gpu_memory", lambda *a, **k: (free - case["weights"]) / GIB), \
         mock.patch.object(kc, "get_schedule", lambda: sched), mock.patch.object(kc, "get_exec", lambda: graphs), \
         mock.patch.object(kc, "get_disagg", lambda: NS(disaggregation_mode="null")), \
         mock.patch.object(kc, "get_parallel", lambda: NS(launch_world_size=1, world_group=NS(cpu_group=None))), \
         mock.patch.object(kc, "get_mm", lambda: NS(mm_feature_transport=None)):
        out.append(kc.KVCacheConfigurator._profile_available_bytes(stub, free / GIB))
print("@@SGLANG-MEMORY@@" + json.dumps(out))
"""
)


@pytest.mark.engine_oracle
def test_sglang_0523_takes_others_times_the_fraction_in_its_own_code() -> None:
    require_oracle_venv()
    cases = [
        {"total": total, "other": other, "context": GIB // 2, "weights": WEIGHTS, "f": f}
        for total in (80 * GIB, find_gpu_sku("h200-sxm-141gb").memory_total_bytes)
        for f in (0.83, 0.88)
        for other in (0, 3 * GIB, 10 * GIB + 12345)
    ]
    done = run_sglang_in_oracle_venv(_SGLANG_SCRIPT, cases, timeout_s=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("@@SGLANG-MEMORY@@")]
    assert done.returncode == 0 and lines, (done.stderr or done.stdout)[-2000:]
    budgets = json.loads(lines[-1].removeprefix("@@SGLANG-MEMORY@@"))
    profile = engine_profile("sglang", None)
    for case, sglang in zip(cases, budgets, strict=True):
        alone = budgets[cases.index({**case, "other": 0})]
        charged = profile.kv_budget(case["total"], case["f"], WEIGHTS, 0, 0)
        charged -= profile.kv_budget(case["total"], case["f"], WEIGHTS, 0, case["other"])
        assert abs((alone - sglang) - charged) <= 2, case  # SGLang's GB floats and int(): a byte or two
