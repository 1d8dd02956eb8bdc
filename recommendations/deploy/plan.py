"""The serving plan a deployment is rendered from: one placement, as the engine and the cluster need it.

A `ServingPlan` is built from a `capacity.placement.PlacementOption` (`from_option`) or from the
`plan` object of `capplan place --json` (`from_mapping`); every renderer reads only this object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from capacity.engines.command_line import table_release
from capacity.engines.kinds import Engine
from capacity.features.lora_spec import LoraSpec
from capacity.features.parallel_layout import engine_dp_ranks_add_gpus, replica_gpus, spelled_batch_limit
from capacity.features.speculative import SpeculativeSpec
from capacity.placement import PlacementOption
from capacity.planning_types import WorkloadProfile
from recommendations.deploy.features import (
    FeatureError,
    lora_from_mapping,
    lora_mapping,
    speculative_from_mapping,
    speculative_mapping,
)


class DeployError(ValueError):
    """The plan cannot be rendered as asked (one line: what is missing or not expressible, and why)."""


# The engine images a plan runs when it names none: the engines' own published images, tagged with the
# release capplan's flag tables were generated from (capacity/engines/command_flags.py), so the command
# line is read by the same parser the image runs. TensorRT-LLM's table comes from a source checkout, not
# a release: its image needs the plan's engine_version (or an explicit image).
ENGINE_IMAGES: dict[Engine, str] = {
    Engine.VLLM: "docker.io/vllm/vllm-openai:v{release}",
    Engine.SGLANG: "docker.io/lmsysorg/sglang:v{release}",
    Engine.TRTLLM: "nvcr.io/nvidia/tensorrt-llm/release:{release}",
}
_RELEASE = re.compile(r"^\d+\.\d+\.\d+[a-z0-9.+-]*$")  # an image tag's release: 0.33.0, 1.2.0rc2, 0.10.1.1
_RELEASE_LINE = re.compile(r"^\d+\.\d+$")  # what capplan's estimates name a release by: 0.33
_DNS_LABEL_BYTES = 63  # a Kubernetes object name that is also a Service name (RFC 1035 label)


@dataclass(frozen=True, slots=True)
class ServingPlan:
    """One placement as a deployment: what to serve, on which GPUs, with which engine settings.

    `gpu_memory_utilization` / `kv_cache_memory_bytes`: the budget the estimate planned (vLLM takes
    either; SGLang's --mem-fraction-static and TensorRT-LLM's --kv_cache_free_gpu_memory_fraction take
    the fraction); None leaves the engine's default, which the estimate also assumed. Both: a packed vLLM
    engine (recommendations.packing), whose start check reads the utilization even with the bytes given
    (0.33 `v1/worker/utils.py` request_memory)."""

    model: str  # capplan registry id
    engine: Engine
    gpu: str  # catalog GPU id
    tp: int = 1
    pp: int = 1
    replicas: int = 1
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    weight_dtype: str = "auto"  # as given to `capplan estimate --dtype`
    kv_cache_dtype: str = "auto"  # as given to `capplan estimate --kv-dtype`
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    hf_repo: str | None = None  # what the engine loads; the registry id when None
    engine_version: str | None = None
    image: str | None = None  # None: ENGINE_IMAGES at the plan's release
    gpus_per_node: int = 8
    dp: int = 1  # attention DP ranks (capacity.features.parallel_layout); max_num_seqs is in the engine's terms
    ep: int = 1  # expert-parallel width
    lora: LoraSpec | None = None  # LoRA adapters served (the workload's `adapters`): the engine's LoRA flags
    speculative: SpeculativeSpec | None = None  # speculative decoding as planned (its draft by id)

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "replicas", "gpus_per_node", "dp", "ep"):
            if getattr(self, name) < 1:
                raise DeployError(f"{name} must be >= 1, not {getattr(self, name)}")
        for name in ("max_model_len", "max_num_seqs", "kv_cache_memory_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DeployError(f"{name} must be >= 1, not {value}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise DeployError(f"gpu_memory_utilization must be in (0, 1], not {self.gpu_memory_utilization}")
        if not self.model.strip():
            raise DeployError("the plan names no model")

    @property
    def gpus_per_replica(self) -> int:
        """One replica's GPUs: a pod's `nvidia.com/gpu` request (vLLM's DP ranks each bring --tp GPUs)."""
        return int(replica_gpus(engine_dp_ranks_add_gpus(self.engine), self.tp, self.pp, self.dp))

    @property
    def served_model(self) -> str:
        """What the engine loads (a Hugging Face repo id or a path)."""
        return self.hf_repo or self.model

    @property
    def release(self) -> str | None:
        """The engine release the image runs: the plan's, else the flag table's (None: not a release).
        A release line (`0.33`, as estimates name it) is the table's release on that line, else its first
        release (`0.21` -> 0.21.0)."""
        table = table_release(self.engine)
        release = self.engine_version or table
        if _RELEASE_LINE.match(release):
            release = table if table.startswith(f"{release}.") else f"{release}.0"
        return release if _RELEASE.match(release) else None

    @property
    def container_image(self) -> str:
        """The image the pods run: the plan's, else the engine's published image at the plan's release."""
        if self.image:
            return self.image
        release = self.release
        if release is None or self.engine not in ENGINE_IMAGES:
            raise DeployError(f"no default {self.engine} image without a release: give engine_version or an image")
        return ENGINE_IMAGES[self.engine].format(release=release)

    @property
    def name(self) -> str:
        """A Kubernetes object name for the deployment (RFC 1035 label: lowercase, digits, '-')."""
        base = re.sub(r"[^a-z0-9]+", "-", f"{self.served_model.rsplit('/', 1)[-1]}-{self.engine}".lower()).strip("-")
        base = base[:_DNS_LABEL_BYTES].rstrip("-")
        return base if base[:1].isalpha() else f"m-{base}"[:_DNS_LABEL_BYTES].rstrip("-")

    def to_mapping(self) -> dict[str, Any]:
        """The plan as plain JSON values (`from_mapping`'s input)."""
        out = asdict(self)
        out["engine"] = self.engine.value
        out["lora"] = None if self.lora is None else lora_mapping(self.lora)
        out["speculative"] = None if self.speculative is None else speculative_mapping(self.speculative)
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ServingPlan:
        """A plan from `capplan place --json`'s `plan` object (keys other than the fields are ignored).

        Given both budgets, the fraction is kept: the engine then measures its own overhead, where the byte
        budget would pin capplan's estimate of it."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key in ("model", "engine", "gpu"):
            if data.get(key) in (None, ""):
                raise DeployError(f"the plan has no {key!r}")
        for key, value in data.items():
            key = _ALIASES.get(key, key)
            if key not in known or value is None:
                continue
            values[key] = _checked(key, value)
        if values.get("gpu_memory_utilization") is not None:
            values.pop("kv_cache_memory_bytes", None)
        try:
            for key, read in (("lora", lora_from_mapping), ("speculative", speculative_from_mapping)):
                if key in values:
                    values[key] = read(values[key])
        except FeatureError as exc:
            raise DeployError(str(exc)) from None
        return cls(**values)

    @classmethod
    def from_option(
        cls,
        option: PlacementOption,
        workload: WorkloadProfile | None = None,
        *,
        hf_repo: str | None = None,
        image: str | None = None,
    ) -> ServingPlan:
        """The plan that realizes a placement option: its layout and dtypes, the workload's memory budget,
        and --max-num-seqs at the planned batch where a latency target set it (`binding` tpot / ttft),
        else the engine's batch limit the option was sized with; the workload's adapters and speculative
        decoding, as the estimate sized them."""
        latency_bound = option.binding != "memory"
        per_rank = option.planned_per_replica // option.dp if latency_bound else option.max_num_seqs
        return cls(
            model=option.model,
            engine=_engine(option.engine),
            gpu=option.gpu,
            tp=option.tp,
            pp=option.pp,
            replicas=option.replicas,
            max_model_len=option.max_model_len,
            max_num_seqs=None if per_rank is None else spelled_batch_limit(_engine(option.engine), per_rank, option.dp),
            weight_dtype=option.weight_dtype,
            kv_cache_dtype=option.kv_dtype,
            gpu_memory_utilization=workload.gpu_memory_utilization if workload is not None else None,
            hf_repo=hf_repo,
            engine_version=option.engine_version,
            image=image,
            gpus_per_node=option.gpus_per_node,
            dp=option.dp,
            ep=option.ep,
            lora=workload.adapters.lora_spec() if workload is not None and workload.adapters else None,
            speculative=workload.speculative if workload is not None else None,
        )


_INT_FIELDS = frozenset(
    {"tp", "pp", "replicas", "max_model_len", "max_num_seqs", "kv_cache_memory_bytes", "gpus_per_node", "dp", "ep"}
)
_TEXT_FIELDS = frozenset({"model", "gpu", "weight_dtype", "kv_cache_dtype", "hf_repo", "engine_version", "image"})
_ALIASES = {"kv_dtype": "kv_cache_dtype"}  # capplan estimate's option name


def _checked(key: str, value: Any) -> Any:
    """One mapping value, type-checked for its field (JSON has no int/bool distinction worth trusting)."""
    if key == "engine":
        return _engine(value)
    if key in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DeployError(f"plan field {key!r} must be an integer, not {type(value).__name__}")
        return value
    if key == "gpu_memory_utilization":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DeployError(f"plan field {key!r} must be a number, not {type(value).__name__}")
        return float(value)
    if key in _TEXT_FIELDS and not isinstance(value, str):
        raise DeployError(f"plan field {key!r} must be text, not {type(value).__name__}")
    return value


def _engine(value: object) -> Engine:
    try:
        return Engine(str(value).lower())
    except ValueError:
        raise DeployError(f"unknown engine {value!r}; expected one of {', '.join(e.value for e in Engine)}") from None
