"""Each engine's scheduler, as the rules the simulation follows, read from the engines' own source.

vLLM V1 (0.33.0, `vllm/v1/core/sched/scheduler.py` `Scheduler.schedule`, line 699):
- one token budget per step, `max_num_batched_tokens` (`engine/arg_utils.py:2940` `get_batch_defaults`:
  16,384 at >= 160 GiB, 8,192 on >= 70 GiB GPUs but A100 and GB10, else 2,048, for the API server;
  `config/scheduler.py:41-43` 2,048 and 128 when not derived), and `max_num_seqs` (1,024 / 1,024 / 256);
  capplan's vLLM profile already derives both (`capacity/engines/vllm/releases.py` `batch_defaults`);
- running requests first, in admission order (the loop at line 795): a decode takes 1 token, a request
  still prefilling its next chunk (chunked prefill is on: `config/scheduler.py:134`
  `enable_chunked_prefill = True`, `:79` `long_prefill_token_threshold = 0`); then waiting requests
  (line 1062), FCFS (`:159` `policy = "fcfs"`), each a chunk of what the budget leaves, while fewer than
  `max_num_seqs` run;
- a waiting request is admitted only if its whole prompt fits the free blocks (`:190`
  `scheduler_reserve_full_isl = True`, `:196` `watermark = 0.0`; `full_sequence_must_fit`, line 1449);
  the first that does not stops admission (`break`, line 1461);
- when a running request cannot get a block, the newest running request (`self.running[-1]`, line 938)
  is preempted: its blocks freed, it goes back to the front of the queue and recomputes prompt + output
  so far (`_preempt_request`); no request is admitted in a step that preempted (line 1050).

SGLang (0.5.23, `sglang/srt/managers/scheduler.py:3894` `get_next_batch_to_run`, `schedule_policy.py`
`PrefillAdder`):
- prefill first: whenever a prefill batch can be formed it runs alone (line 3991), else one decode batch
  of every running request (`enable_mixed_chunk = False` by default, `arg_groups/fields/schedule.py:208`);
- a prefill batch takes at most `chunked_prefill_size` new tokens (`arg_groups/memory_hook.py` by GPU
  memory: capplan's `capacity/engines/sglang.py` `chunked_prefill_size`) and `max_prefill_tokens`
  (16,384, `fields/schedule.py:71`); one request at a time is chunked, and continues first in the next
  prefill batch;
- admission reserves each running request's remaining output, `min(max_new - out, CLIP_MAX_NEW_TOKENS =
  4096)` (`schedule_policy.py:89`) x the new-token ratio (1.0 for fixed-length requests, `ignore_eos`, as
  benchmarks send them: `_get_running_request_total_token_offset`, line 781), and needs input +
  min(max_new, 4096) free beside it;
- `max_running_requests` = min(max(min(pool tokens / context length x 512, 4096), 2048), pool tokens / 2)
  (`mem_cache/kv_cache_configurator.py:3119` `resolve_max_num_reqs`);
- a decode batch that does not fit retracts requests, fewest output tokens then longest input first
  (`schedule_batch.py:3552` `_get_decode_retraction_order`, `fields/schedule.py:126`
  `retraction_policy = "length"`), back to the queue.

TensorRT-LLM (PyTorch backend): in-flight batching like vLLM's (decodes and context chunks in one step, a
token budget `max_num_tokens` 8,192 and `max_batch_size` 2,048 from capplan's profile), but its default
capacity scheduler is GUARANTEED_NO_EVICT: a request is admitted only with blocks for its whole input and
output reserved, so it never preempts. Modelled as vLLM's step with that reservation (not read from a wheel:
no TensorRT-LLM in the oracle venv).

The CPU work around a step (async scheduling in vLLM, SGLang's overlap scheduler) is not a separate term:
the per-step overhead fitted per engine (`capacity.performance.STEP_OVERHEAD_S`) is what remains unhidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from capacity.engines import Engine
from capacity.estimate import Estimate

SGLANG_MAX_PREFILL_TOKENS = 16384  # arg_groups/fields/schedule.py max_prefill_tokens (0.5.23)
SGLANG_CLIP_MAX_NEW_TOKENS = 4096  # managers/schedule_policy.py CLIP_MAX_NEW_TOKENS
SGLANG_ENABLE_MIXED_CHUNK = False  # arg_groups/fields/schedule.py enable_mixed_chunk
VLLM_RESERVE_FULL_ISL = True  # vllm/config/scheduler.py scheduler_reserve_full_isl (0.33.0)
VLLM_WATERMARK = 0.0  # vllm/config/scheduler.py watermark (0.33.0)
NO_CLIP = 2**62
UNCAPPED = 2**31  # no running-sequence cap given: the pool alone limits


class StepShape(StrEnum):
    """What one scheduler step holds."""

    MIXED = "mixed"  # decodes first, prefill chunks in the leftover budget (vLLM V1, TensorRT-LLM)
    PREFILL_FIRST = "prefill_first"  # a prefill batch alone when one forms, else a decode batch (SGLang)


class Eviction(StrEnum):
    """What the engine does when a running request cannot grow."""

    NEWEST_RECOMPUTE = "newest_recompute"  # vLLM: preempt running[-1], recompute later
    RETRACT_LENGTH = "retract_length"  # SGLang: retract fewest-output / longest-input first
    NEVER = "never"  # TensorRT-LLM GUARANTEED_NO_EVICT: admission reserved the whole request


class Admission(StrEnum):
    """What a waiting request must find free to be admitted."""

    PROMPT = "prompt"  # vLLM: its whole prompt (scheduler_reserve_full_isl)
    PROMPT_AND_OUTPUT = "prompt_and_output"  # SGLang / TensorRT-LLM: prompt + output, beside reservations


@dataclass(frozen=True, slots=True)
class SchedulerRules:
    """One replica's scheduler: limits and the shape of a step."""

    engine: Engine
    shape: StepShape
    admission: Admission
    eviction: Eviction
    token_budget: int  # new tokens per step (vLLM max_num_batched_tokens, SGLang chunked_prefill_size)
    max_running: int  # sequences running at once (max_num_seqs / max_running_requests / max_batch_size)
    max_prefill_tokens: int  # SGLang: new tokens a prefill batch takes at most (vLLM: the token budget)
    reserve_clip_tokens: int  # output tokens a reservation counts at most (SGLang 4,096)
    capacity_units: int  # the KV pool as the scheduler allocates it (blocks or token slots)
    source: str

    @property
    def reserves_output(self) -> bool:
        return self.admission is Admission.PROMPT_AND_OUTPUT


def scheduler_rules(est: Estimate) -> SchedulerRules:
    """The scheduler of the estimate's engine with the limits the estimate resolved (the deployment's,
    else the engine's defaults); the pool less the units the engine holds back (vLLM's null block)."""
    engine = Engine(est.engine)
    pool = est.pool
    budget = max(pool.max_num_batched_tokens, 1)
    capacity = max(pool.capacity_units - est.start_reserved_units, 0)
    if engine is Engine.SGLANG:
        slots = est.max_num_seqs or 1  # resolve_max_num_reqs, as the estimate derives it from the pool
        return SchedulerRules(
            engine,
            StepShape.PREFILL_FIRST,
            Admission.PROMPT_AND_OUTPUT,
            Eviction.RETRACT_LENGTH,
            budget,
            slots,
            max(SGLANG_MAX_PREFILL_TOKENS, budget),
            SGLANG_CLIP_MAX_NEW_TOKENS,
            capacity,
            "SGLang 0.5.23 scheduler.py get_next_batch_to_run / schedule_policy.py PrefillAdder",
        )
    running = est.max_num_seqs or UNCAPPED
    if engine is Engine.TRTLLM:
        return SchedulerRules(
            engine,
            StepShape.MIXED,
            Admission.PROMPT_AND_OUTPUT,
            Eviction.NEVER,
            budget,
            running,
            budget,
            NO_CLIP,
            capacity,
            "TensorRT-LLM in-flight batching, GUARANTEED_NO_EVICT (vLLM-like step; capplan's profile defaults)",
        )
    return SchedulerRules(
        engine,
        StepShape.MIXED,
        Admission.PROMPT,
        Eviction.NEWEST_RECOMPUTE,
        budget,
        running,
        budget,
        NO_CLIP,
        capacity,
        "vLLM 0.33.0 v1/core/sched/scheduler.py Scheduler.schedule",
    )
