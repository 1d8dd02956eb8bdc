"""The operation-by-operation step cost candidate (evaluation/step_cost_candidate.py, not wired) and the
leave-one-source-family-out split: hand-checked on synthetic observations (the full study is
`python -m tools.step_cost_study`, too slow for the suite)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from capacity.perf_fit import Observation, StepTerms, leave_one_group_out
from evaluation.perf_cv import family_of
from evaluation.perf_measurements import load_perf_measurements
from evaluation.step_cost_candidate import Candidate, predict_candidate, start


def _step(**kw: float) -> StepTerms:
    base = {"memory_s": 0.0, "compute_s": 0.0, "comm_s": 0.0}
    return StepTerms(**{**base, **kw})


def _tpot(step: StepTerms, measured: float = 0.01, group: str = "g", engine: str = "vllm") -> Observation:
    return Observation("r", group, "tpot", measured, "nvidia", engine, decode=step, decode_steps=1)


def _with(c: Candidate, **values: float) -> Candidate:
    return dataclasses.replace(c, values={**c.values, **{k: dict.fromkeys(c.values[k], v) for k, v in values.items()}})


def test_each_operation_on_its_own_roofline_plus_the_cpu_partly_hidden() -> None:
    step = _step(weight_s=0.004, kv_s=0.002, gemm_s=0.001, attention_s=0.0005, comm_bytes_s=0.0003, comm_calls=100,
                 sequences=50)  # fmt: skip
    obs = [_tpot(step)]
    c = _with(start(obs), e_weights=0.8, e_kv=0.5, e_compute=0.5, allreduce_latency_s=1e-5, o_step_s=0.001,
              o_seq_s=2e-5, hidden=0.5)  # fmt: skip
    gemm = max(0.004 / 0.8, 0.001 / 0.5)  # weights read: 5 ms
    attention = max(0.002 / (0.8 * 0.5), 0.0005 / 0.5)  # KV at half the weights' share: 5 ms
    gpu = gemm + attention + 0.0003 + 100 * 1e-5
    cpu = 0.001 + 50 * 2e-5
    assert predict_candidate(obs, c)[0] == pytest.approx(gpu + cpu - 0.5 * min(gpu, cpu))
    # fully hidden: the longer of the two; not hidden: both
    assert predict_candidate(obs, _with(c, hidden=1.0))[0] == pytest.approx(max(gpu, cpu))
    assert predict_candidate(obs, _with(c, hidden=0.0))[0] == pytest.approx(gpu + cpu)


def test_a_class_the_fit_never_saw_takes_nvidias_or_the_engines_mean() -> None:
    obs = [_tpot(_step(weight_s=0.004, sequences=1))]
    c = start(obs)
    c = dataclasses.replace(c, values={**c.values, "o_step_s": {"vllm": 0.001, "sglang": 0.003}})
    assert c.get("o_step_s", "trtllm") == pytest.approx(0.002)
    assert c.get("e_weights", "amd") == c.get("e_weights", "nvidia")


def test_leave_one_family_out_never_sees_the_left_out_family() -> None:
    def obs(family: str, measured: float) -> Observation:
        return _tpot(_step(memory_s=0.004, compute_s=0.001, weight_s=0.004), measured, group=f"{family}-group")

    data = [obs("a", 0.006), obs("a", 0.0062), obs("b", 0.02), obs("b", 0.021)]
    by_family = leave_one_group_out(data, lambda o: o.group.split("-")[0])
    changed = [*data[:2], obs("b", 0.2), obs("b", 0.21)]  # b's own numbers do not move b's predictions
    assert np.allclose(leave_one_group_out(changed, lambda o: o.group.split("-")[0])[2:], by_family[2:])
    assert not np.allclose(leave_one_group_out(changed)[:2], by_family[:2])  # a's do move


def test_every_reference_row_has_a_family() -> None:
    rows = load_perf_measurements().rows
    family = family_of(rows)
    names = {family(dataclasses.replace(_tpot(_step(), group=row.source_group), row_id=row.id)) for row in rows}
    assert 5 <= len(names) < len({row.source_group for row in rows})
