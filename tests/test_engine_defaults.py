"""`EngineProfile.defaults_read_kv_dtype`: a planner asks the defaults of an engine that says False once for every KV
dtype (`capacity.grid.planning._registry`), so such an engine's defaults must not move with the KV dtype. The oracle
is the profile's own `defaults` asked at each KV dtype, over the grid's test models and GPUs, several releases and
layouts; and vLLM, which says True, has a case where they do move (its block size), so the flag is not idle."""

from __future__ import annotations

import pytest

from capacity.engines import Engine
from capacity.engines.protocol import DefaultsRequest
from capacity.engines.registry import engine_profile
from tests.test_grid import gpus, models

KV_DTYPES = ("auto", "fp8", "fp8_e5m2", "bfloat16")
RELEASES = {Engine.SGLANG: (None, "0.4.6", "0.5.3", "0.5.14"), Engine.TRTLLM: (None,)}


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, vs in RELEASES.items() for v in vs])
def test_an_engine_that_says_its_defaults_do_not_read_the_kv_dtype_is_held_to_it(
    engine: Engine, version: str | None
) -> None:
    profile = engine_profile(engine, version)
    assert profile.defaults_read_kv_dtype is False
    asked = 0
    for gm in models():
        for gpu in gpus():
            for tp, pp, dp in ((1, 1, 1), (2, 1, 1), (4, 1, 2), (2, 2, 1)):
                limit, memory = gm.spec.context_limit_tokens, gpu.memory_total_bytes
                answers = {
                    repr(profile.defaults(DefaultsRequest(gm.spec, gpu, memory, limit, tp, pp, kv, attention_dp=dp)))
                    for kv in KV_DTYPES
                }
                assert len(answers) == 1, (gm.repo_id, gpu.id, tp, pp, dp)
                asked += 1
    assert asked > 100


def test_vllm_defaults_read_the_kv_dtype() -> None:
    """An MLA model on Hopper: FlashMLA's 64-token blocks in bf16, vLLM's 16-token default with an fp8 cache
    (`releases._backend_priority_block`), so the grid asks vLLM once per KV dtype."""
    profile = engine_profile(Engine.VLLM)
    assert profile.defaults_read_kv_dtype is True
    h100 = next(g for g in gpus() if g.id == "h100-sxm-80gb")
    moved = [
        gm.repo_id
        for gm in models()
        if gm.spec.is_mla
        and len(
            {
                profile.defaults(
                    DefaultsRequest(gm.spec, h100, h100.memory_total_bytes, gm.spec.context_limit_tokens, 1, 1, kv)
                ).block_size
                for kv in ("auto", "fp8")
            }
        )
        > 1
    ]
    assert moved
