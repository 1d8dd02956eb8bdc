"""What the grid enumerates: the models (`GridModel`), the options (`GridOptions`), the contexts of a
model and the weight dtypes it is planned at (see the package docstring for the rules)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from capacity import engine_constants as ec
from capacity.engines import Engine
from capacity.engines import sglang_constants as sc
from capacity.spec import ModelSpec

# `plain` needs its overhead by hand: not a fleet-wide row
ENGINES = (Engine.VLLM.value, Engine.SGLANG.value, Engine.TRTLLM.value)
WEIGHT_CHOICES = ("bf16", "auto", "fp8", "int4", "mxfp4")  # the rules of weight_dtype_choices
KV_CHOICES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16")  # fp8*: GPUs with fp8_support
TARGET_CONCURRENCIES = (1, 8, 32, 128, 512)
MIN_CONTEXT = 1024


@dataclass(frozen=True, slots=True)
class GridModel:
    """One model of the grid: its registry id, its spec and the checkpoint's real size if known."""

    repo_id: str
    spec: ModelSpec
    checkpoint_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GridOptions:
    engines: tuple[str, ...] = ENGINES
    vllm_version: str | None = None  # None: engine_constants.VLLM_DEFAULT_VERSION
    sglang_version: str = sc.SGLANG_DEFAULT_VERSION
    trtllm_version: str = ec.TRTLLM_DEFAULT_VERSION
    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)
    pp_sizes: tuple[int, ...] = (2, 4)  # only where one node at the largest TP does not fit
    weight_dtypes: tuple[str, ...] = WEIGHT_CHOICES
    kv_dtypes: tuple[str, ...] = ("auto", "fp8")
    min_context: int = MIN_CONTEXT
    speed: bool = True  # tpot_ms / output_tokens_per_second (capacity.performance); False: null columns
    # MoE models: the DP-attention x expert-parallel layouts they are served with, one node each
    # (`capacity.features.parallel_layout.dp_candidates`), as rows beside the TP ones; False: TP x PP only
    dp_layouts: bool = True

    def engine_version(self, engine: str) -> str | None:
        """The release the grid plans an engine at, stated on every row so the release-bound rules (TensorRT-LLM's
        window and state managers, its model classes) apply and the marts say which release a row is sized for."""
        versions = {
            Engine.VLLM: self.vllm_version,
            Engine.SGLANG: self.sglang_version,
            Engine.TRTLLM: self.trtllm_version,
        }
        return versions.get(Engine(engine))

    def __post_init__(self) -> None:
        unknown = (
            [e for e in self.engines if e not in ENGINES]
            + [w for w in self.weight_dtypes if w not in WEIGHT_CHOICES]
            + [k for k in self.kv_dtypes if k not in KV_CHOICES]
        )
        if unknown:
            raise ValueError(
                f"grid options: unsupported {', '.join(map(repr, unknown))} (engines {', '.join(ENGINES)}; "
                f"weight dtypes {', '.join(WEIGHT_CHOICES)}; KV dtypes {', '.join(KV_CHOICES)})"
            )
        for name, version in (("SGLang", self.sglang_version), ("TensorRT-LLM", self.trtllm_version)):
            try:
                ec.parse_version(version)
            except ValueError:
                raise ValueError(f"grid options: {name} release {version!r} is not a version (e.g. 1.2)") from None
        if any(tp < 1 for tp in self.tp_sizes) or any(pp < 2 for pp in self.pp_sizes) or self.min_context < 1:
            raise ValueError("grid options: TP sizes >= 1, PP sizes >= 2 (PP = 1 is always there), min_context >= 1")


def grid_contexts(limit: int, min_context: int = MIN_CONTEXT) -> list[int]:
    """Powers of two from `min_context` below the limit, then the limit itself."""
    contexts = []
    t = min_context
    while t < limit:
        contexts.append(t)
        t *= 2
    contexts.append(limit)
    return contexts


def weight_dtype_choices(spec: ModelSpec, wanted: Iterable[str]) -> list[tuple[str, bool, bool]]:
    """(weight dtype, needs fp8 support, needs fp4 support) for a model; see the module docstring."""
    own = spec.quantization.weight_format if spec.quantization else None
    plain_bf16 = own is None and spec.torch_dtype.lower() in ("bfloat16", "bf16")
    choices: list[tuple[str, bool, bool]] = []
    for dtype in wanted:
        if dtype == "bf16" or (dtype == "auto" and not plain_bf16) or (dtype == "int4" and own != "int4"):
            choices.append((dtype, False, False))
        elif dtype == "fp8" and own != "fp8":
            choices.append((dtype, True, False))
        elif dtype == "mxfp4" and own != "mxfp4" and spec.num_experts > 0:
            choices.append((dtype, False, True))
    return choices
