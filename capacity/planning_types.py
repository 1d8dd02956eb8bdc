"""The types placement and procurement share, so neither imports the other's back: what a
workload asks for (`WorkloadProfile`, its `DtypePolicy`) and the request-size bucket plan
(`capacity.procurement` builds it; a fleet plan of `capacity.placement` carries it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capacity.features.prefix_caching import NO_PREFIX_CACHING_STATED, PrefixCaching
from capacity.features.speculative import SpeculativeSpec
from capacity.spec import SpecError

if TYPE_CHECKING:  # the feature's own types (capacity/features/lora.py imports below this module's users)
    from capacity.features.lora import AdapterSet

ENUMERATION_LIMIT = 200_000
SOLVER_TIME_LIMIT_S = 30.0


@dataclass(frozen=True, slots=True)
class SolverOptions:
    """How a procurement is solved (`plan_procurement`, `plan_buckets`, `plan_fleet`): GPUs bought in whole
    nodes (else one by one), at most `gpu_limits` of a SKU, by `method`, within the solver's limits."""

    whole_nodes: bool = True
    gpu_limits: Mapping[str, int] | None = None
    method: str = "auto"
    time_limit_s: float = SOLVER_TIME_LIMIT_S
    enumeration_limit: int = ENUMERATION_LIMIT  # plan_procurement's exact search, in combinations

    def limits(self) -> dict[str, int]:
        return dict(self.gpu_limits or {})


DEFAULT_SOLVER = SolverOptions()

DEFAULT_HEADROOM = 0.9
DEFAULT_TP_SIZES = (1, 2, 4, 8)
DEFAULT_PP_SIZES = (1, 2, 4)


@dataclass(frozen=True, slots=True)
class DtypePolicy:
    """Which weight and KV dtypes a workload accepts (values of `--dtype` / `--kv-dtype`).

    `auto` is the checkpoint's own format (a quantized checkpoint is only served as published)."""

    name: str
    weight_dtypes: tuple[str, ...]
    kv_dtypes: tuple[str, ...]


DTYPE_POLICIES: dict[str, DtypePolicy] = {
    "native": DtypePolicy("native", ("auto",), ("auto",)),
    "fp8-kv": DtypePolicy("fp8-kv", ("auto",), ("auto", "fp8")),
    "fp8": DtypePolicy("fp8", ("auto", "fp8"), ("auto", "fp8")),
    "any": DtypePolicy("any", ("auto", "fp8", "int4"), ("auto", "fp8")),
}


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """What one workload needs: concurrent sequences of a context length, served by these models."""

    name: str
    models: tuple[str, ...]
    target_concurrency: int
    context_tokens: int  # T: tokens per sequence to plan capacity for (prompt + output)
    max_model_len: int | None = None  # L: the deployment's max_model_len (default T)
    dtype_policy: DtypePolicy = DTYPE_POLICIES["native"]
    headroom: float = DEFAULT_HEADROOM  # plan at headroom x B_max
    engine: str = "vllm"
    engine_version: str | None = None
    gpus: tuple[str, ...] = ()  # allowed SKUs (empty: every SKU with a price)
    max_gpus_per_replica: int | None = None
    tp_sizes: tuple[int, ...] = DEFAULT_TP_SIZES
    pp_sizes: tuple[int, ...] = DEFAULT_PP_SIZES
    gpu_memory_utilization: float | None = None
    overhead_bytes_per_gpu: int | None = None  # what-if override (the plain engine has none)
    context_source: str = ""  # how T was chosen, e.g. "p95 of the context distribution"
    description: str = ""
    # latency targets (None: none); a replica then runs at the largest B that meets them and memory
    tpot_ms_target: float | None = None  # time per output token (= ITL) at steady state
    ttft_ms_target: float | None = None  # time to first token, steady state (prefill beside the batch)
    output_tokens: int | None = None  # generated tokens per request (default: min(256, T / 2))
    # load as a request rate, with length distributions: the Mélange plan (capacity.procurement)
    request_rate_per_s: float | None = None
    context_percentiles: tuple[tuple[float, int], ...] = ()  # (quantile, tokens) of prompt + output
    input_percentiles: tuple[tuple[float, int], ...] = ()  # (quantile, prompt tokens)
    output_percentiles: tuple[tuple[float, int], ...] = ()  # (quantile, generated tokens)
    # a prompt prefix its requests share (held once) and the share of prompt tokens the prefix cache serves
    prefix_caching: PrefixCaching = NO_PREFIX_CACHING_STATED
    # speculative decoding on every replica, and the draft's per-token acceptance rate on this traffic
    speculative: SpeculativeSpec | None = None
    acceptance_rate: float | None = None
    adapters: AdapterSet | None = None  # LoRA adapters served: they set the plan's max_loras (features/lora.py)

    @property
    def model_len(self) -> int:
        return self.max_model_len or self.context_tokens

    def validate(self) -> None:
        """Raise SpecError with a one-line reason for a profile that cannot be planned."""
        if not self.name:
            raise SpecError("a workload profile needs a name")
        if not self.models:
            raise SpecError(f"workload {self.name!r}: no model")
        if self.target_concurrency < 1:
            raise SpecError(f"workload {self.name!r}: target_concurrency must be >= 1, got {self.target_concurrency}")
        if self.context_tokens < 1:
            raise SpecError(f"workload {self.name!r}: context_tokens must be >= 1, got {self.context_tokens}")
        if self.model_len < self.context_tokens:
            raise SpecError(
                f"workload {self.name!r}: max_model_len {self.model_len:,} "
                f"is below context_tokens {self.context_tokens:,}"
            )
        if not 0 < self.headroom <= 1:
            raise SpecError(f"workload {self.name!r}: headroom must be in (0, 1], got {self.headroom}")
        if self.max_gpus_per_replica is not None and self.max_gpus_per_replica < 1:
            raise SpecError(f"workload {self.name!r}: max_gpus_per_replica must be >= 1")
        for label, target in (("tpot_ms_target", self.tpot_ms_target), ("ttft_ms_target", self.ttft_ms_target)):
            if target is not None and not 0 < target < 1e7:
                raise SpecError(f"workload {self.name!r}: {label} must be a positive number of milliseconds")
        if self.request_rate_per_s is not None and not 0 < self.request_rate_per_s < 1e9:
            raise SpecError(f"workload {self.name!r}: request_rate must be a positive number of requests/s")
        if self.output_tokens is not None and not 0 < self.output_tokens < self.context_tokens:
            raise SpecError(f"workload {self.name!r}: output_tokens must be between 1 and context_tokens - 1")
        if self.prefix_caching.problem():
            raise SpecError(f"workload {self.name!r}: {self.prefix_caching.problem()}")
        if self.acceptance_rate is not None and (self.speculative is None or not 0 <= self.acceptance_rate <= 1):
            raise SpecError(f"workload {self.name!r}: acceptance_rate must be in [0, 1], with `speculative` given")

    @property
    def generated_tokens(self) -> int:
        return self.output_tokens or min(256, max(1, self.context_tokens // 2))

    @property
    def has_latency_target(self) -> bool:
        return self.tpot_ms_target is not None or self.ttft_ms_target is not None


@dataclass(frozen=True, slots=True)
class RequestBucket:
    """Requests of about one size: `share` of the workload's requests, sized at these lengths."""

    label: str  # e.g. in<=p50/out<=p95
    input_tokens: int
    output_tokens: int
    share: float

    @property
    def context_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Candidate:
    """One layout a workload x model may run on, with what a replica of it serves per bucket."""

    key: str  # the layout label: gpu tp=.. pp=.. weights/kv
    gpu: str
    gpus_per_replica: int
    gpus_per_node: int
    usd_per_gpu_hour: float
    requests_per_second: Mapping[str, float]  # bucket label -> requests/s per replica (absent: infeasible)
    binding: Mapping[str, str]  # bucket label -> memory | latency | throughput
    batch: Mapping[str, int]  # bucket label -> B per replica
    tpot_ms: Mapping[str, float]
    ttft_ms: Mapping[str, float]

    @property
    def usd_per_replica_hour(self) -> float:
        return self.gpus_per_replica * self.usd_per_gpu_hour


@dataclass(frozen=True, slots=True)
class BucketDemand:
    """A workload x model served at a request rate, in buckets, on any of its candidates."""

    workload: str
    model: str
    request_rate_per_s: float
    buckets: tuple[RequestBucket, ...]
    candidates: tuple[Candidate, ...]

    def bucket_requests_per_second(self, bucket: RequestBucket) -> float:
        return self.request_rate_per_s * bucket.share


@dataclass(frozen=True, slots=True)
class BucketChoice:
    """Share `share` of one bucket's requests served on one candidate layout."""

    workload: str
    model: str
    bucket: RequestBucket
    candidate: Candidate
    share: float
    requests_per_second: float  # of the bucket sent here
    replica_load: float  # replicas' worth of time it takes: requests/s / (requests/s per replica)

    @property
    def binding(self) -> str:
        return self.candidate.binding[self.bucket.label]

    @property
    def usd_per_million_output_tokens(self) -> float:
        """$ per million generated tokens of this bucket on this layout, replicas fully used."""
        tokens_per_hour = self.candidate.requests_per_second[self.bucket.label] * self.bucket.output_tokens * 3600
        return self.candidate.usd_per_replica_hour / tokens_per_hour * 1e6


@dataclass(frozen=True)
class BucketPlan:
    method: str  # highs | cheapest-per-request
    optimal: bool
    whole_nodes: bool
    choices: tuple[BucketChoice, ...]
    replicas: dict[tuple[str, str, str], int]  # (workload, model, candidate key) -> replicas
    gpus_bought: dict[str, int]  # SKU -> GPUs
    usd_per_gpu_hour: dict[str, float]
    unserved: tuple[tuple[str, str, str], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def usd_per_hour(self) -> float:
        return float(sum(n * self.usd_per_gpu_hour[g] for g, n in self.gpus_bought.items()))

    @property
    def output_tokens_per_hour(self) -> float:
        return sum(c.requests_per_second * c.bucket.output_tokens * 3600 for c in self.choices)

    @property
    def usd_per_million_output_tokens(self) -> float | None:
        """The plan's $/hour over the output tokens per hour its workloads ask for."""
        tokens = self.output_tokens_per_hour
        return self.usd_per_hour / tokens * 1e6 if tokens else None
