"""Serving simulation: one replica's scheduler, per engine, under a benchmark's load (pure, no I/O).

`simulate(est, perf_inputs(...), Load.closed(...), efficiency_for(...))` -> `ServingResult`.
"""

from capacity.serving.result import (
    SIMULATED_SPEED_FIELDS,
    SIMULATED_SPEED_METRICS,
    Distribution,
    ServingResult,
    reported_speed,
)
from capacity.serving.rules import SchedulerRules, scheduler_rules
from capacity.serving.sim import simulate
from capacity.serving.workload import Lengths, Load, LoadKind

__all__ = [
    "SIMULATED_SPEED_FIELDS",
    "SIMULATED_SPEED_METRICS",
    "Distribution",
    "Lengths",
    "Load",
    "LoadKind",
    "SchedulerRules",
    "ServingResult",
    "reported_speed",
    "scheduler_rules",
    "simulate",
]
