"""Speed with speculative decoding at an acceptance rate, on the performance model's roofline
(`capacity.performance`).

One engine step of B sequences: the draft proposes k tokens per sequence in k forward passes of B tokens
(B x top-k on SGLang's tree; inside the step's graphs, so no second scheduler overhead), then the target
verifies k + 1 tokens per sequence in one pass of B (k + 1) tokens (SGLang: --speculative-num-draft-tokens).
Each sequence emits (1 - a^(k+1)) / (1 - a) tokens per step at a per-token acceptance rate a
(`speculative.accepted_tokens_per_step`), so TPOT = step time / tokens per step and throughput = B x
tokens per step / step time. ngram and suffix decoding propose on the CPU: only the verify pass is costed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from capacity.engines.kinds import Engine
from capacity.estimate import Estimate
from capacity.features.speculative import (
    DraftShape,
    SpecMethod,
    SpeculativeSpec,
    SpeculativeSpeed,
    accepted_tokens_per_step,
)
from capacity.features.speculative_memory import draft_weight_bytes_per_gpu, resolved_draft
from capacity.performance import (
    PerfEfficiency,
    PerfInputs,
    Performance,
    estimate_kv_element_bytes,
    pipeline_seconds,
    serving_tokens_per_second,
    step_seconds,
)
from capacity.spec import DeploymentSpec, ModelSpec


def draft_inputs(p: PerfInputs, spec: SpeculativeSpec, draft: DraftShape, kv_element_bytes: int) -> PerfInputs:
    """The draft's per-rank reads and FLOPs on the target's GPU and TP. MTP layers cost what the target's
    layers cost, one each (an MoE MTP layer reads the experts its tokens route to, like the target's);
    an EAGLE head or a draft model is dense: its parameters, its layers' KV and attention."""
    if spec.method is SpecMethod.MTP:
        share = len(draft.layers) / max(p.layers_on_rank, 1)
        return replace(
            p,
            dense_weight_bytes=p.dense_weight_bytes * share,
            expert_weight_bytes=p.expert_weight_bytes * share,
            active_params=p.active_params * share,
            full_kv_bytes_per_token=p.full_kv_bytes_per_token * share,
            attention_flops_per_cached_token=p.attention_flops_per_cached_token * share,
            windowed_kv=(),
            windowed_attention=(),
            state_bytes_per_sequence=0.0,
            layers_on_rank=len(draft.layers),
            pp=1,
        )
    tp = p.tp
    return replace(
        p,
        dense_weight_bytes=float(draft.weight_bytes_per_gpu(tp)),
        expert_weight_bytes=0.0,
        num_experts=0,
        experts_per_token=0,
        active_params=draft.params / tp + draft.replicated_params,
        full_kv_bytes_per_token=float(sum(c.bytes_per_token(kv_element_bytes, tp) for c in draft.layers)),
        attention_flops_per_cached_token=sum(
            4.0 * draft.num_attention_heads / tp * c.query_head_dim for c in draft.layers
        ),
        windowed_kv=(),
        windowed_attention=(),
        state_bytes_per_sequence=0.0,
        hidden_size=draft.hidden_size,
        layers_on_rank=max(len(draft.layers), 1),
        pp=1,
    )


def speculative_step_seconds(
    target: PerfInputs,
    draft: PerfInputs | None,
    spec: SpeculativeSpec,
    batch: float,
    context_tokens: float,
    eff: PerfEfficiency,
) -> float:
    """One engine step on one stage: the target verifying every sequence's proposals, plus the draft's
    forward passes (none for ngram / suffix)."""
    verify = float(step_seconds(target, batch * spec.verify_tokens_per_sequence, batch, context_tokens, eff))
    if draft is None:
        return verify
    one_pass = float(step_seconds(draft, batch * spec.eagle_topk, batch, context_tokens, eff)) - eff.step_overhead_s
    return verify + spec.draft_passes * one_pass


def at_acceptance(
    base: Performance,
    spec: SpeculativeSpec,
    draft: DraftShape | None,
    acceptance_rate: float,
    kv_element_bytes: int,
    rate_given: bool = True,
    draft_weight_bytes: int | None = None,
) -> Performance:
    """`base` (the speed without speculation, `capacity.performance.performance`) with TPOT and decode
    throughput at the acceptance rate; the target's own weights exclude the draft's (read by its passes):
    `draft_weight_bytes`, what the estimate added for the draft (default: its weights at the target's TP)."""
    if base.inputs is None:
        return base
    p = base.inputs
    if draft is not None:  # the estimate's weights on the rank hold the draft's too: its passes read them
        own = draft.weight_bytes_per_gpu(spec.draft_tp or p.tp) if draft_weight_bytes is None else draft_weight_bytes
        p = replace(p, dense_weight_bytes=max(p.dense_weight_bytes - own, 0.0))
    draft_p = draft_inputs(p, spec, draft, kv_element_bytes) if draft is not None else None
    context = base.input_tokens + base.output_tokens // 2
    batch = base.concurrency
    stage = speculative_step_seconds(p, draft_p, spec, batch, context, base.efficiency)
    step = float(pipeline_seconds(p, stage, batch * spec.verify_tokens_per_sequence))
    plain = float(pipeline_seconds(p, step_seconds(p, batch, batch, context, base.efficiency), batch))
    tokens = accepted_tokens_per_step(acceptance_rate, spec.num_speculative_tokens)
    speed = SpeculativeSpeed(plain * 1e3, step * 1e3, tokens, acceptance_rate, spec, rate_given)
    return replace(
        base,
        tpot_ms=speed.tpot_ms,
        output_tokens_per_second=float(
            serving_tokens_per_second(batch * p.pp * tokens / step, batch, base.output_tokens, base.prefill_ms / 1e3)
        ),
        speculation=speed,
    )


def with_speculation(
    speed: Callable[[int], Performance],
    model: ModelSpec,
    est: Estimate,
    deployment: DeploymentSpec,
    acceptance_rate: float | None,
) -> Callable[[int], Performance]:
    """`speed` (Performance at a batch, `performance.speed_at`) with the deployment's speculative decoding at
    the acceptance rate (0 where none is given, and said so); unchanged without speculation."""
    spec = deployment.speculative
    if spec is None or spec.method is SpecMethod.UNKNOWN:
        return speed
    engine = Engine(est.engine)
    draft = resolved_draft(model, deployment, engine)
    added = draft_weight_bytes_per_gpu(draft, deployment, engine) if draft is not None else 0
    kv_bytes = estimate_kv_element_bytes(est)
    rate = acceptance_rate if acceptance_rate is not None else 0.0
    given = acceptance_rate is not None

    def sped(batch: int) -> Performance:
        return at_acceptance(speed(batch), spec, draft, rate, kv_bytes, rate_given=given, draft_weight_bytes=added)

    return sped
