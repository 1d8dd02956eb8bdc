"""vLLM 0.33's own memory budget at start, run on CPU against a simulated device: the oracle of
`--other-process-gib` and of unified-memory GPUs.

Run with the oracle venv's interpreter (tools/engine_oracle/setup_venv.sh builds it), never with the
project venv: it imports vLLM. Reads one JSON document on stdin, prints one line `@@vllm-memory@@ JSON`:

    {"cases": [CASE, ...]}  ->  {"vllm_version": ..., "cases": [RESULT, ...]}

CASE (bytes per GPU):
    id                  any string, echoed back
    total_bytes         what cudaMemGetInfo reports as the device total
    other_bytes         memory other processes hold when the engine starts
    context_bytes       this process's own CUDA context, there before the snapshot
    weights_bytes       torch memory the loaded weights take
    activation_bytes    the profiling run's torch peak above the weights (freed after it)
    non_torch_bytes     memory outside torch the instance adds after the snapshot (NCCL, buffers)
    utilization         --gpu-memory-utilization
    integrated          the device is integrated (UMA): vLLM reads the host's available memory instead
    host_available_bytes  psutil.virtual_memory().available on an integrated device before the engine
                        starts (what the engine allocates comes off it, as on a real unified-memory host)

RESULT: {"id", "requested_bytes", "available_kv_bytes"} when vLLM starts, or {"id", "error"} with the
ValueError's text when `request_memory` refuses.

What is simulated is only what torch and psutil would report (free/total, torch's allocated and peak
bytes, reserved bytes, the host's available memory) and the platform's `is_integrated_gpu` answer.
The rules are vLLM's own: `MemorySnapshot.measure`, `v1/worker/utils.request_memory`,
`utils/mem_utils.memory_profiling`, and the budget line of `Worker.determine_available_memory`
(`requested_memory - profile_result.non_kv_cache_memory`, CUDA-graph estimate off).
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

MARKER = "@@vllm-memory@@ "


@dataclass
class Device:
    """The memory one GPU reports, as a test sets it."""

    total: int
    others: int
    context: int
    torch_allocated: int = 0
    torch_peak: int = 0
    non_torch: int = 0

    def mem_get_info(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        used = self.others + self.context + self.torch_allocated + self.non_torch
        return self.total - used, self.total

    def memory_stats(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        return {"allocated_bytes.all.peak": self.torch_peak, "allocated_bytes.all.current": self.torch_allocated}

    def memory_reserved(self, *args: Any, **kwargs: Any) -> int:
        return self.torch_allocated

    def reset_peak(self, *args: Any, **kwargs: Any) -> None:
        self.torch_peak = self.torch_allocated

    def host_memory(self, host_available: int) -> SimpleNamespace:
        """psutil.virtual_memory() on a unified-memory device: what the engine allocates leaves the host too."""
        own = self.context + self.torch_allocated + self.non_torch
        return SimpleNamespace(available=host_available - own, total=self.total)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    import torch
    from vllm.config import CacheConfig
    from vllm.utils import mem_utils
    from vllm.v1.worker.utils import request_memory

    dev = Device(case["total_bytes"], case["other_bytes"], case["context_bytes"])
    host_available = case.get("host_available_bytes", 0)  # before the engine starts
    with ExitStack() as stack:
        patch = stack.enter_context
        patch(mock.patch.object(torch.accelerator, "get_memory_info", dev.mem_get_info, create=True))
        patch(mock.patch.object(torch.accelerator, "memory_stats", dev.memory_stats, create=True))
        patch(mock.patch.object(torch.accelerator, "memory_reserved", dev.memory_reserved, create=True))
        patch(mock.patch.object(torch.accelerator, "reset_peak_memory_stats", dev.reset_peak, create=True))
        patch(mock.patch.object(torch.accelerator, "empty_cache", lambda *a, **k: None, create=True))
        patch(mock.patch.object(mem_utils.current_platform, "is_integrated_gpu", lambda *a, **k: case["integrated"]))
        patch(mock.patch.object(mem_utils.psutil, "virtual_memory", lambda: dev.host_memory(host_available)))
        cache_config = CacheConfig(gpu_memory_utilization=case["utilization"])
        snapshot = mem_utils.MemorySnapshot(device="cuda:0")  # Worker.init_device's init_snapshot
        try:
            requested = request_memory(snapshot, cache_config)
        except ValueError as error:
            return {"id": case["id"], "error": str(error)}
        dev.torch_allocated = dev.torch_peak = case["weights_bytes"]  # load_model
        with mem_utils.memory_profiling(snapshot, weights_memory=case["weights_bytes"]) as profile:
            dev.torch_peak = case["weights_bytes"] + case["activation_bytes"]  # profile_run's peak
            dev.non_torch += case["non_torch_bytes"]
        available = requested - profile.non_kv_cache_memory  # determine_available_memory, graphs off
    return {"id": case["id"], "requested_bytes": requested, "available_kv_bytes": int(available)}


def main() -> None:
    import vllm

    request = json.load(sys.stdin)
    results = [run_case(case) for case in request["cases"]]
    print(MARKER + json.dumps({"vllm_version": vllm.__version__, "cases": results}))


if __name__ == "__main__":
    main()
