"""The request-size bucket plan's types, shared by `capacity.placement` (a fleet plan carries its
bucket part) and `capacity.procurement` (which builds it), so neither module imports the other's
types back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
