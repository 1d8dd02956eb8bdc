"""The peak of vLLM's own sampler dummy run, measured on the CPU: the sampler engine-oracle runner.

Run with the oracle venv's interpreter (tools/engine_oracle/setup_venv.sh builds it), never with the
project venv: it imports vLLM. Arguments: one JSON document

    {"num_reqs": S, "vocab": V, "dtype": "bfloat16", "source": null | "/path/to/unpacked/wheel",
     "triton": false, "num_sm": 132}      (or the same with "cases": [{"num_reqs": ..., "num_sm": ...}, ...])

and it prints one JSON document (a list of them for "cases") {"vllm_version", "peak_bytes", "logits_bytes", "fp32_units",
"live_at_peak": [[shape, dtype, bytes], ...]}: the most bytes of tensor storage alive at once while
the V1 model runner's `_dummy_sampler_run` (v1/worker/gpu_model_runner.py) runs, the model-dtype
logits included, and `fp32_units` = (peak - logits_bytes) / (S x V x 4), the count capplan models.

What is vLLM's and what is not: the function body is `GPUModelRunner._dummy_sampler_run` as the
release ships it (taken from its source file and run on a stand-in runner that has only what the
function reads: the model's `compute_logits`, the device, the sampler, no speculative decoding, no
multimodal encoder); the sampler, its top-k/top-p, penalties and metadata are the release's own
modules. With `source` (an unpacked older wheel) those modules are loaded from that tree in place of
the installed 0.33.0 ones. The top-k/top-p module is bound to `forward_native`, the path CUDA takes
when the FlashInfer sampler is off (on a CPU vLLM would pick `forward_cpu`); the FlashInfer path
runs CUDA kernels and is not measured here. With `"triton": true` (releases from 0.17, which ship
v1/sample/ops/topk_topp_triton.py) `apply_top_k_top_p` takes the branch a CUDA machine takes
(`HAS_TRITON` and at least 8 rows): the release's `apply_top_k_top_p_triton` runs as shipped, with
`num_compute_units` answering `num_sm` and only its kernel launches (`_topk_topp_kernel[grid](...)`,
`_topk_topp`, `_apply_topp_split`) replaced by no-ops: a Triton kernel allocates no torch memory,
so every byte the path holds (the per-program buffer it caches, the k/p casts) is still counted;
the logits are just not masked.

Bytes are counted per storage (a view or an in-place result adds nothing) from the op that creates
it until its last reference dies (weakref finalizers on the storage), through a TorchDispatchMode.
Kernel-internal scratch memory (a CUDA sort's temporary buffers) is below the dispatcher and not
counted: the figure is the tensors the Python code keeps alive.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib.util
import json
import sys
import types
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

SAMPLE_MODULES = (  # loaded from `source` in this order (dependencies first) when they exist there
    "vllm.v1.sample.logits_processor",
    "vllm.v1.sample.metadata",
    "vllm.v1.sample.ops.bad_words",
    "vllm.v1.sample.ops.penalties",
    "vllm.v1.sample.ops.logprobs",
    "vllm.v1.sample.ops.topk_topp_sampler",
    "vllm.v1.sample.sampler",
)


class LiveBytes(TorchDispatchMode):
    """Tracks the bytes of every storage an op creates until the storage is freed; keeps the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[tuple[int, ...], str, int]] = {}
        self.now = 0
        self.peak = 0
        self.at_peak: list[tuple[tuple[int, ...], str, int]] = []

    def _free(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.now -= entry[2]

    def __torch_dispatch__(self, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in self.live or storage.nbytes() == 0:
                continue
            self.live[key] = (tuple(t.shape), str(t.dtype).removeprefix("torch."), storage.nbytes())
            self.now += storage.nbytes()
            weakref.finalize(storage, self._free, key)
            if self.now > self.peak:
                self.peak = self.now
                self.at_peak = sorted(self.live.values(), key=lambda e: -e[2])
        return out


class _LogprobsMode(enum.StrEnum):
    """vllm.config.LogprobsMode as 0.10-0.11 had it (an enum; 0.33 has a Literal)."""

    RAW_LOGPROBS = "raw_logprobs"
    RAW_LOGITS = "raw_logits"
    PROCESSED_LOGPROBS = "processed_logprobs"
    PROCESSED_LOGITS = "processed_logits"


def _load_source_modules(root: Path) -> None:
    """Replace the installed sampler modules by the ones of an unpacked older release."""
    import vllm.utils
    import vllm.utils.torch_utils
    import vllm.v1.sample

    for moved in ("is_pin_memory_available", "make_tensor_with_pad"):  # in vllm.utils before 0.12
        if not hasattr(vllm.utils, moved) and hasattr(vllm.utils.torch_utils, moved):
            setattr(vllm.utils, moved, getattr(vllm.utils.torch_utils, moved))
    import vllm.config
    import vllm.config.model

    if not hasattr(vllm.config, "LogprobsMode"):  # vllm.config.LogprobsMode before the config split, an enum
        vllm.config.LogprobsMode = _LogprobsMode  # type: ignore[attr-defined,unused-ignore]

    for name in SAMPLE_MODULES:
        path = root / (name.replace(".", "/") + ".py")
        if not path.exists():
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def _dummy_sampler_run(root: Path) -> types.FunctionType:
    """`GPUModelRunner._dummy_sampler_run` of the release under `root`, compiled from its source."""
    tree = ast.parse((root / "vllm/v1/worker/gpu_model_runner.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "GPUModelRunner":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "_dummy_sampler_run":
                    item.decorator_list = []
                    module = ast.Module(body=[item], type_ignores=[])
                    namespace: dict[str, Any] = {"torch": torch, "replace": dataclasses.replace,
                                                 # 0.14: the stand-in model is no multimodal encoder
                                                 "supports_mm_encoder_only": lambda model: False}
                    sample_metadata = sys.modules["vllm.v1.sample.metadata"]
                    namespace["SamplingMetadata"] = sample_metadata.SamplingMetadata
                    try:
                        from vllm.config.model import PROCESSED_LOGPROBS_MODES

                        namespace["PROCESSED_LOGPROBS_MODES"] = PROCESSED_LOGPROBS_MODES
                    except ImportError:
                        pass
                    old_processors = sys.modules.get("vllm.v1.sample.logits_processor")
                    if hasattr(old_processors, "LogitsProcessorManager"):  # 0.9
                        namespace["LogitsProcessorManager"] = old_processors.LogitsProcessorManager  # type: ignore[union-attr]
                    if hasattr(sample_metadata, "LogitsProcessors"):
                        namespace["LogitsProcessors"] = sample_metadata.LogitsProcessors
                    else:
                        try:
                            from vllm.v1.sample.logits_processor import LogitsProcessors

                            namespace["LogitsProcessors"] = LogitsProcessors
                        except ImportError:
                            pass
                    exec(compile(module, str(root), "exec"), namespace)
                    return namespace["_dummy_sampler_run"]  # type: ignore[no-any-return,unused-ignore]
    raise SystemExit(f"no GPUModelRunner._dummy_sampler_run in {root}")


class _NoKernel:
    """Stands for a Triton kernel launch on a machine without a GPU: `kernel[grid](...)` and `kernel(...)`."""

    def __getitem__(self, grid: Any) -> _NoKernel:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> _NoKernel:  # register_warmup() and the like (0.30+)
        return self


def _enable_triton(num_sm: int) -> None:
    """Take the CUDA branch of `apply_top_k_top_p`: the Triton top-k/top-p with its kernels stubbed."""
    topk = sys.modules["vllm.v1.sample.ops.topk_topp_sampler"]
    path = Path(str(topk.__file__)).with_name("topk_topp_triton.py")
    spec = importlib.util.spec_from_file_location("vllm.v1.sample.ops.topk_topp_triton", path)
    assert spec is not None and spec.loader is not None
    triton_ops = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = triton_ops
    spec.loader.exec_module(triton_ops)
    triton_ops.num_compute_units = lambda *_: num_sm  # type: ignore[attr-defined]
    for name in ("_topk_topp_kernel", "_topk_topp", "_apply_topp_split"):
        if hasattr(triton_ops, name):
            setattr(triton_ops, name, _NoKernel())
    for name in dir(triton_ops):  # what the sampler module imports from it when HAS_TRITON held at import
        if not name.startswith("__") and not hasattr(topk, name):
            setattr(topk, name, getattr(triton_ops, name))
    topk.HAS_TRITON = True  # type: ignore[attr-defined]
    topk.apply_top_k_top_p_triton = triton_ops.apply_top_k_top_p_triton  # type: ignore[attr-defined]


def _sampler() -> Any:
    """The release's V1 Sampler with the CUDA non-FlashInfer top-k/top-p path bound."""
    from vllm.v1.sample.sampler import Sampler

    try:
        sampler = Sampler(logprobs_mode="raw_logprobs")
    except TypeError:  # before 0.10 the sampler took no arguments
        sampler = Sampler()
    sampler.logprobs_mode = getattr(sampler, "logprobs_mode", "raw_logprobs")
    topk = sampler.topk_topp_sampler
    topk.forward = topk.forward_native
    return sampler


def measure(num_reqs: int, vocab: int, dtype: str, source: str | None, triton: bool = False,
            num_sm: int = 132) -> dict[str, Any]:
    """Run the release's dummy sampler run once under the live-bytes mode."""
    import vllm

    root = Path(source) if source else Path(vllm.__file__).parent.parent
    if source:
        _load_source_modules(root)
    import vllm.v1.sample.metadata
    import vllm.v1.sample.sampler

    if triton:
        _enable_triton(num_sm)
    run = _dummy_sampler_run(root)
    model_dtype = getattr(torch, dtype)

    def compute_logits(hidden_states: torch.Tensor, *_: Any) -> torch.Tensor:
        return torch.randn(hidden_states.shape[0], vocab, dtype=model_dtype)

    runner = types.SimpleNamespace(
        model=types.SimpleNamespace(compute_logits=compute_logits),
        device=torch.device("cpu"),
        sampler=_sampler(),
        use_spec_decode=False,
        speculative_config=None,
        vllm_config=types.SimpleNamespace(model_config=types.SimpleNamespace(multimodal_config=None)),
    )
    hidden = torch.zeros(num_reqs, 1, dtype=model_dtype)
    torch.manual_seed(0)
    mode = LiveBytes()
    with torch.inference_mode(), mode:
        output = run(runner, hidden)
        del output
    logits_bytes = num_reqs * vocab * torch.empty((), dtype=model_dtype).element_size()
    version = "unknown"
    for meta in root.glob("vllm-*.dist-info"):
        version = meta.name.removeprefix("vllm-").removesuffix(".dist-info")
    return {
        "vllm_version": version if source else vllm.__version__,
        "peak_bytes": mode.peak,
        "logits_bytes": logits_bytes,
        "fp32_units": (mode.peak - logits_bytes) / (num_reqs * vocab * 4),
        "live_at_peak": [[list(shape), dt, n] for shape, dt, n in mode.at_peak],
    }


def _measure_case(case: dict[str, Any]) -> dict[str, Any]:
    return measure(int(case["num_reqs"]), int(case["vocab"]), case.get("dtype", "bfloat16"), case.get("source"),
                   bool(case.get("triton")), int(case.get("num_sm", 132)))  # fmt: skip


if __name__ == "__main__":
    document = json.loads(sys.argv[1])
    if "cases" in document:  # several sizes in one process (same source and path: the modules are patched once)
        print(json.dumps([_measure_case({**document, **case}) for case in document["cases"]]))
    else:
        print(json.dumps(_measure_case(document)))
