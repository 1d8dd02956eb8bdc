"""The engine command line that realizes a plan's budget, in each engine's own spelling.

Every flag written here is one of the engine's own (capacity/engines/command_flags.py, generated from
the engines' parsers), and the line reads back through `capplan estimate --from-command` to the same
budget (tests/test_deploy_manifests.py); tests/test_deploy_engine_parsers.py parses it with vLLM's and
SGLang's own argument parsers.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from capacity.engines.kinds import Engine
from recommendations.deploy.features import FeatureError, lora_args, speculative_args
from recommendations.deploy.plan import DeployError, ServingPlan

PORT = 8000  # every engine is told to listen here (vLLM's and TensorRT-LLM's default; SGLang's is 30000)
HEALTH_PATH = "/health"  # vLLM, SGLang and trtllm-serve answer 200 here once the model is loaded

# capplan's 16-bit and fp8 weight dtypes as vLLM's and SGLang's flags: --dtype for the activations' float
# type, --quantization fp8 for online fp8 quantization of a 16-bit checkpoint
_WEIGHT_FLAGS = {
    "bf16": ("--dtype", "bfloat16"),
    "fp16": ("--dtype", "float16"),
    "float32": ("--dtype", "float32"),
    "fp8": ("--quantization", "fp8"),
}


@dataclass(frozen=True, slots=True)
class _Spelling:
    """How one engine's server spells the settings a plan carries (None: the engine has no such flag)."""

    label: str
    launcher: tuple[str, ...]
    model_flag: str | None  # None: the model is the first positional argument
    tp: str
    pp: str
    max_model_len: str
    max_num_seqs: str
    memory_fraction: str
    kv_cache_bytes: str | None
    weight_flags: Mapping[str, tuple[str, str]]  # capplan --dtype -> (flag, value)
    kv_dtypes: Mapping[str, str]  # capplan --kv-dtype -> --kv-cache-dtype value
    kv_dtype_flag: str | None


SPELLINGS: dict[Engine, _Spelling] = {
    Engine.VLLM: _Spelling(
        "vLLM",
        ("vllm", "serve"),
        None,
        "--tensor-parallel-size",
        "--pipeline-parallel-size",
        "--max-model-len",
        "--max-num-seqs",
        "--gpu-memory-utilization",
        "--kv-cache-memory-bytes",
        _WEIGHT_FLAGS,
        {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
        "--kv-cache-dtype",
    ),
    Engine.SGLANG: _Spelling(
        "SGLang",
        ("python3", "-m", "sglang.launch_server"),
        "--model-path",
        "--tp-size",
        "--pp-size",
        "--context-length",
        "--max-running-requests",
        "--mem-fraction-static",
        None,
        _WEIGHT_FLAGS,
        {"bf16": "bfloat16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
        "--kv-cache-dtype",
    ),
    # trtllm-serve takes dtypes only through --extra_llm_api_options (a YAML file): not written here
    Engine.TRTLLM: _Spelling(
        "TensorRT-LLM",
        ("trtllm-serve",),
        None,
        "--tp_size",
        "--pp_size",
        "--max_seq_len",
        "--max_batch_size",
        "--kv_cache_free_gpu_memory_fraction",
        None,
        {},
        {},
        None,
    ),
}


@dataclass(frozen=True, slots=True)
class EngineCommandLine:
    """The server command: `command` starts the engine, `args` configure it (a container's two fields)."""

    engine: Engine
    command: tuple[str, ...]
    args: tuple[str, ...]

    @property
    def argv(self) -> tuple[str, ...]:
        return (*self.command, *self.args)

    @property
    def text(self) -> str:
        """The line to paste in a shell (quoted where needed)."""
        return shlex.join(self.argv)


def spelling(engine: Engine) -> _Spelling:
    """The engine's spelling; the plain baseline has no server, so nothing to write."""
    if engine not in SPELLINGS:
        raise DeployError(f"{engine} is capplan's engine-free baseline, not a server to deploy")
    return SPELLINGS[engine]


def engine_command(plan: ServingPlan, port: int = PORT) -> EngineCommandLine:
    """The engine's server command for `plan`, listening on 0.0.0.0:`port` (engines sharing a GPU: one each)."""
    s = spelling(plan.engine)
    args: list[str] = [s.model_flag, plan.served_model] if s.model_flag else [plan.served_model]
    args += [s.tp, str(plan.tp)]
    if plan.pp > 1:
        args += [s.pp, str(plan.pp)]
    args += _parallel_args(plan)
    args += _dtype_args(plan, s)
    if plan.max_model_len is not None:
        args += [s.max_model_len, str(plan.max_model_len)]
    if plan.max_num_seqs is not None:
        args += [s.max_num_seqs, str(plan.max_num_seqs)]
    if plan.gpu_memory_utilization is not None:
        args += [s.memory_fraction, f"{plan.gpu_memory_utilization:g}"]
    if plan.kv_cache_memory_bytes is not None:
        if s.kv_cache_bytes is None:
            raise DeployError(
                f"{s.label} takes the KV budget as a fraction only ({s.memory_fraction}), not in bytes: "
                "plan it with gpu_memory_utilization"
            )
        args += [s.kv_cache_bytes, str(plan.kv_cache_memory_bytes)]
    try:
        args += lora_args(plan.engine, plan.lora) + speculative_args(plan.engine, plan.speculative)
    except FeatureError as exc:
        raise DeployError(str(exc)) from None
    args += ["--host", "0.0.0.0", "--port", str(port)]
    return EngineCommandLine(plan.engine, s.launcher, tuple(args))


def _parallel_args(plan: ServingPlan) -> list[str]:
    """DP attention and expert parallel in the engine's flags (capacity.features.parallel_layout reads them back):
    vLLM `--data-parallel-size N --enable-expert-parallel` (EP spans tp x dp), SGLang `--attn-dp-size N
    --ep-size E` (0.5.23's spelling of `--enable-dp-attention --dp-size N`); TensorRT-LLM's live in a YAML file."""
    if plan.dp == 1 and plan.ep == 1:
        return []
    if plan.engine is Engine.VLLM:
        if plan.ep not in (1, plan.tp * plan.dp):
            raise DeployError(f"vLLM's expert parallel spans tp x dp = {plan.tp * plan.dp} ranks, not ep {plan.ep}")
        return ["--data-parallel-size", str(plan.dp)] * (plan.dp > 1) + ["--enable-expert-parallel"] * (plan.ep > 1)
    if plan.engine is Engine.SGLANG:
        return ["--attn-dp-size", str(plan.dp)] * (plan.dp > 1) + ["--ep-size", str(plan.ep)] * (plan.ep > 1)
    raise DeployError(f"{spelling(plan.engine).label}'s attention DP and expert parallel are not written here")


def _dtype_args(plan: ServingPlan, s: _Spelling) -> list[str]:
    args: list[str] = []
    weight, kv = plan.weight_dtype.lower(), plan.kv_cache_dtype.lower()
    if weight != "auto":
        if weight not in s.weight_flags:
            raise DeployError(
                f"{s.label} has no flag that serves weights as {weight} "
                "(serve a checkpoint quantized to it, planned with dtype auto)"
            )
        args += s.weight_flags[weight]
    if kv != "auto":
        if kv not in s.kv_dtypes or s.kv_dtype_flag is None:
            raise DeployError(f"{s.label}'s command line cannot set a {kv} KV cache")
        args += [s.kv_dtype_flag, s.kv_dtypes[kv]]
    return args
