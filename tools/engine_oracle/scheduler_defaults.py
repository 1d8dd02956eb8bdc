"""Print the scheduler defaults of vLLM 0.33.0 and SGLang 0.5.23 as one JSON object (run in .venv-oracle).

Read by tests/test_serving_sim.py's oracle test: the engines' own defaults for what capacity/serving's
scheduler rules assume. vLLM: `vllm/config/scheduler.py` `SchedulerConfig`'s field defaults. SGLang:
`arg_groups/fields/schedule.py` `Schedule()`'s defaults, `environ.py`'s new-token-ratio settings, and
`managers/schedule_policy.py`'s CLIP_MAX_NEW_TOKENS, read from the source with `ast` (importing that module
pulls torchvision, which has no build for the oracle venv's CPU torch).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import pathlib
from typing import Any


def vllm_defaults() -> dict[str, Any]:
    from vllm.config.scheduler import SchedulerConfig

    fields = {f.name: f for f in dataclasses.fields(SchedulerConfig)}

    def default(name: str) -> Any:
        value = fields[name].default
        return getattr(value, "default", value)  # a pydantic Field(default=...)

    names = ("long_prefill_token_threshold", "enable_chunked_prefill", "policy", "scheduler_reserve_full_isl")
    out = {name: default(name) for name in (*names, "watermark")}
    out["DEFAULT_MAX_NUM_BATCHED_TOKENS"] = SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS
    out["DEFAULT_MAX_NUM_SEQS"] = SchedulerConfig.DEFAULT_MAX_NUM_SEQS
    return out


def sglang_defaults() -> dict[str, Any]:
    import sglang
    from sglang.srt.arg_groups.fields.schedule import Schedule
    from sglang.srt.environ import envs

    schedule = Schedule()
    names = (
        "enable_mixed_chunk",
        "max_prefill_tokens",
        "schedule_policy",
        "retraction_policy",
        "schedule_conservativeness",
        "disable_overlap_schedule",
        "num_continuous_decode_steps",
        "max_running_requests",
    )
    out: dict[str, Any] = {name: getattr(schedule, name) for name in names}
    for name in ("SGLANG_INIT_NEW_TOKEN_RATIO", "SGLANG_RETRACT_DECODE_STEPS"):
        out[name] = getattr(envs, name).get()
    policy = pathlib.Path(sglang.__file__).parent / "srt" / "managers" / "schedule_policy.py"
    for node in ast.walk(ast.parse(policy.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CLIP_MAX_NEW_TOKENS" for t in node.targets):
            # int(os.environ.get("SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION", "4096"))
            out["CLIP_MAX_NEW_TOKENS"] = int(node.value.args[0].args[1].value)  # type: ignore[attr-defined]
    out["version"] = sglang.__version__
    return out


if __name__ == "__main__":
    import vllm

    print(json.dumps({"vllm_version": vllm.__version__, "vllm": vllm_defaults(), "sglang": sglang_defaults()}))
