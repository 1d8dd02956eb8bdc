"""Example-query latency on a published warehouse (target: each answers in <= 100 ms).

    python benchmarks/queries.py [--warehouse var/warehouse.duckdb] [--repeat 7]

Run `capplan nightly` first. Prints the median and best of `--repeat` runs per query in
warehouse/queries/, the load average, and the ratio against a same-run baseline: a trivial
`SELECT count(*) FROM marts.capacity_grid` on the same connection.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb

from warehouse.sql import example_queries

BUDGET_MS = 100.0


def timed(con: duckdb.DuckDBPyConnection, sql: str, repeat: int) -> list[float]:
    con.execute(sql).fetchall()  # warm the buffer pool
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        con.execute(sql).fetchall()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default=os.environ.get("CAPPLAN_WAREHOUSE", "var/warehouse.duckdb"))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    path = Path(args.warehouse)
    if not path.is_file():
        sys.exit(f"no warehouse at {path}: run `capplan nightly` first")
    con = duckdb.connect(str(path), read_only=True)
    baseline = statistics.median(timed(con, "SELECT count(*) FROM marts.capacity_grid", args.repeat))
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, baseline count(*) {baseline:.1f} ms")
    over = 0
    for name, sql in sorted(example_queries().items()):
        samples = timed(con, sql, args.repeat)
        median = statistics.median(samples)
        over += median > BUDGET_MS
        print(f"{name:40} median {median:7.1f} ms  best {min(samples):7.1f} ms  x{median / baseline:5.1f} baseline"
              f"{'  OVER BUDGET' if median > BUDGET_MS else ''}")
    print(f"{over} of {len(example_queries())} queries over {BUDGET_MS:.0f} ms")


if __name__ == "__main__":
    main()
