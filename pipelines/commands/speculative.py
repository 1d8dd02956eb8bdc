"""`capplan estimate`'s speculative-decoding options: vLLM's `--speculative-config` JSON, SGLang's
`--speculative-*` flags and `--acceptance-rate`, read into a `SpeculativeSpec` whose draft is resolved
like the target (registry, catalog, a path to its config.json), else assumed and said so. The options are
declared with the others in `options.ESTIMATE_OPTIONS`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from capacity.estimate import Estimate
from capacity.features.speculative import (
    SpecMethod,
    SpeculativeConfigError,
    SpeculativeSpec,
    from_sglang_flags,
    from_vllm_config,
)
from capacity.features.speculative_speed import with_speculation
from capacity.performance import Performance
from capacity.spec import DeploymentSpec, ModelSpec
from pipelines.commands.common import fail


@dataclass(frozen=True, slots=True)
class SpeculativeArgs:
    """The speculative options as given (or as a pasted command set them): one field per `capplan estimate`
    parameter this module reads."""

    speculative: bool = False
    speculative_config: str | None = None
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    acceptance_rate: float | None = None

    @classmethod
    def pop(cls, params: dict[str, Any]) -> SpeculativeArgs:
        """Take this module's options out of `params`."""
        names = [field.name for field in fields(cls)]
        return cls(**{name: params.pop(name) for name in names if name in params})

    def sglang_spec(self, algorithm: str, architecture: str | None) -> SpeculativeSpec:
        """SGLang's `--speculative-*` flags as the engine reads them for a target of `architecture`
        (`algorithm`: the --speculative-algorithm given)."""
        return from_sglang_flags(
            algorithm,
            self.speculative_draft_model_path,
            self.speculative_num_steps,
            self.speculative_eagle_topk,
            self.speculative_num_draft_tokens,
            architecture,
        )

    def spec(self, target: ModelSpec) -> SpeculativeSpec | None:
        """The declared speculative decoding, its draft resolved; a one-line error where it cannot be read."""
        if self.acceptance_rate is not None and not 0 <= self.acceptance_rate <= 1:
            fail(f"--acceptance-rate must be in [0, 1], got {self.acceptance_rate:g}")
        try:
            if self.speculative_config is not None and self.speculative_algorithm is not None:
                fail("give --speculative-config (vLLM) or --speculative-algorithm (SGLang), not both")
            if self.speculative_config is not None:
                spec: SpeculativeSpec | None = from_vllm_config(self.speculative_config)
            elif self.speculative_algorithm is not None:
                spec = self.sglang_spec(self.speculative_algorithm, target.architecture)
            else:
                spec = SpeculativeSpec(SpecMethod.UNKNOWN) if self.speculative else None
        except SpeculativeConfigError as exc:
            fail(str(exc))
        if spec is None:
            if self.acceptance_rate is not None:
                fail("--acceptance-rate needs speculative decoding (--speculative-config or --speculative-algorithm)")
            return None
        from models_registry.resolve import with_resolved_draft

        return with_resolved_draft(spec)

    def speed(
        self, perf: Performance | None, target: ModelSpec, deployment: DeploymentSpec, result: Estimate
    ) -> Performance | None:
        """The speed block at --acceptance-rate (0 where not given) with the deployment's speculative decoding."""
        if perf is None:
            return None
        return with_speculation(lambda _: perf, target, result, deployment, self.acceptance_rate)(perf.concurrency)
