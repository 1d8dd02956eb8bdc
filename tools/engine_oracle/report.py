"""Print how capplan's vLLM profile compares with vLLM 0.33.0's planner, quantity by quantity.

    .venv/bin/python tools/engine_oracle/report.py

The same cases and comparisons as the `engine_oracle` pytest group (tests/test_engine_oracle.py),
as a report instead of pass/fail: counts per quantity and, per model, one disagreeing case.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.test_engine_oracle import iter_summaries, load_oracle_run


def main() -> int:
    for line in iter_summaries(load_oracle_run()):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
