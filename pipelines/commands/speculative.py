"""`capplan estimate`'s speculative-decoding options: vLLM's `--speculative-config` JSON, SGLang's
`--speculative-*` flags and `--acceptance-rate`, read into a `SpeculativeSpec` whose draft is resolved
like the target (registry, catalog, a path to its config.json), else assumed and said so."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from capacity.dtypes import element_bytes
from capacity.engines import Engine
from capacity.estimate import Estimate
from capacity.features.speculative import (
    SpecMethod,
    SpeculativeConfigError,
    SpeculativeSpec,
    from_sglang_flags,
    from_vllm_config,
)
from capacity.features.speculative_memory import draft_shape, resolved_draft
from capacity.features.speculative_speed import at_acceptance
from capacity.performance import Performance
from capacity.spec import DeploymentSpec, ModelSpec, SpecError
from pipelines.commands.common import fail

SpeculativeOption = Annotated[
    bool,
    typer.Option("--speculative", help="Speculative decoding of an unstated method (not sized: flagged)."),
]
SpeculativeConfigOption = Annotated[
    str | None,
    typer.Option(
        "--speculative-config",
        metavar="JSON",
        help='vLLM\'s speculative config, e.g. \'{"method": "eagle3", "model": "ID", "num_speculative_tokens": 3}\': '
        "the draft's weights and KV layers are sized (MTP from the model's own layers).",
    ),
]
SpeculativeAlgorithmOption = Annotated[
    str | None,
    typer.Option(
        "--speculative-algorithm", metavar="NAME", help="SGLang: EAGLE, EAGLE3, NEXTN, STANDALONE or NGRAM (sized)."
    ),
]
SpeculativeDraftOption = Annotated[
    str | None,
    typer.Option("--speculative-draft-model-path", metavar="ID", help="SGLang: the draft checkpoint (id or path)."),
]
SpeculativeStepsOption = Annotated[
    int | None, typer.Option("--speculative-num-steps", metavar="N", help="SGLang: draft steps per decode step.")
]
SpeculativeTopkOption = Annotated[
    int | None, typer.Option("--speculative-eagle-topk", metavar="N", help="SGLang: branches per draft step.")
]
SpeculativeDraftTokensOption = Annotated[
    int | None,
    typer.Option("--speculative-num-draft-tokens", metavar="N", help="SGLang: tokens verified per sequence."),
]
AcceptanceRateOption = Annotated[
    float | None,
    typer.Option(
        "--acceptance-rate",
        metavar="A",
        help="Per-token acceptance rate of the draft's proposals (0-1): TPOT and throughput with speculative "
        "decoding (default 0: every step emits one token).",
    ),
]

# the `capplan estimate` parameters this module reads (popped from the command's parameters)
PARAMETERS = (
    "speculative",
    "speculative_config",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "acceptance_rate",
)


@dataclass(frozen=True, slots=True)
class SpeculativeArgs:
    """The speculative options as given (or as a pasted command set them)."""

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
        return cls(**{name: params.pop(name) for name in PARAMETERS if name in params})

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
                spec = from_sglang_flags(
                    self.speculative_algorithm,
                    self.speculative_draft_model_path,
                    self.speculative_num_steps,
                    self.speculative_eagle_topk,
                    self.speculative_num_draft_tokens,
                    target.architecture,
                )
            else:
                spec = SpeculativeSpec(SpecMethod.UNKNOWN) if self.speculative else None
        except SpeculativeConfigError as exc:
            fail(str(exc))
        if spec is None:
            if self.acceptance_rate is not None:
                fail("--acceptance-rate needs speculative decoding (--speculative-config or --speculative-algorithm)")
            return None
        return _with_draft(spec)

    def speed(
        self, perf: Performance | None, target: ModelSpec, deployment: DeploymentSpec, result: Estimate
    ) -> Performance | None:
        """The speed block at --acceptance-rate (0 where not given) with the deployment's speculative decoding."""
        spec = deployment.speculative
        if perf is None or spec is None or spec.method is SpecMethod.UNKNOWN:
            return perf
        try:
            draft = resolved_draft(target, deployment, Engine(result.engine))
            kv_bytes = element_bytes(result.kv_dtype.lower())
        except SpecError:
            return perf
        rate = self.acceptance_rate if self.acceptance_rate is not None else 0.0
        return at_acceptance(perf, spec, draft, rate, kv_bytes, rate_given=self.acceptance_rate is not None)


def _with_draft(spec: SpeculativeSpec) -> SpeculativeSpec:
    """The draft resolved like MODEL (registry, bundled catalog, a config.json path); where it is in none of
    them the estimate assumes an EAGLE-sized head and says so."""
    if spec.draft_model is None or not spec.method.has_weights or spec.method is SpecMethod.MTP:
        return spec
    from models_registry.resolve import load_model

    try:
        resolved = load_model(spec.draft_model)
    except (LookupError, SpecError, OSError):
        return spec
    shape = draft_shape(resolved.spec, spec.method, spec.draft_model, _draft_vocab_size(spec.draft_model))
    return replace(spec, draft=shape)


def _draft_vocab_size(ref: str) -> int | None:
    """EAGLE-3's `draft_vocab_size` where the draft is a local config (its lm_head spans that vocabulary)."""
    path = Path(ref).expanduser()
    config = path / "config.json" if path.is_dir() else path
    try:
        value = json.loads(config.read_text()).get("draft_vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None
