"""Peak memory and time of one Prometheus API ingest against big answers (issue 25, item 4).

A local server (its own process, so its bodies are not counted) answers every range query with
the same big body: `--shape points` one series of `--points` points, `--shape series` `--series`
series of one point each, `--shape mixed` the two in turn. The ingest runs in this process; the
peak RSS (the process's VmHWM: unlike ru_maxrss, which Linux carries over an exec from the
forked parent, it starts afresh in this process) and the wall time are printed as one JSON line. A watchdog stops the run when
the RSS passes `--kill-mb` (the numbers up to then are printed), so an unbounded reader is
measured without taking the machine down.

    python benchmarks/prometheus_answers.py --shape mixed --queries 33
    python benchmarks/prometheus_answers.py --shape points --points 200000 --max-points 1000000

Run from another checkout (`cd ../main && python /path/to/benchmarks/prometheus_answers.py`) it
measures that checkout's reader (options it does not know are not passed).

Measured 2026-12-05 on the shared 2-core machine (start RSS 99 MB each time):

- `--shape mixed --queries 33` (50 MB answers: one series of 2,000,000 points, 500,000 series of
  one point, in turn): before issue 25, killed by the watchdog at 5,005 MB after 189 s, still
  reading; after, `--max-points 3000000`: peak 2,899 MB, 189 s, 2,499,998 samples kept (the first
  answer whole, the second up to the budget, whole series only), one `too_large` row saying why,
  the 31 other queries not sent.
- `--shape points --points 300000 --queries 1`: peak 646 MB before (one batch of 300,000 lines),
  329 MB after (16,384-point batches); the same 300,000 samples.
- `--shape mixed --points 100000 --series 20000 --queries 4`: 533 MB, 26 s before; 315 MB, 23 s
  after with `--max-points 250000` (224,998 samples, the budget named in one line).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import inspect
import json
import multiprocessing
import os
import sys
import threading
import time
from typing import Any

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
START = 1_764_547_200


def _labels(i: int) -> str:
    return json.dumps({"deployment": f"d{i:07d}", "engine": "0", "model_name": MODEL})


def body(shape: str, points: int, series: int) -> bytes:
    if shape == "points":
        values = ",".join(f'[{START + i / 1000:.3f},"0.{i % 1000:03d}"]' for i in range(points))
        result = f'{{"metric":{_labels(0)},"values":[{values}]}}'
    else:
        result = ",".join(f'{{"metric":{_labels(i)},"values":[[{START},"0.{i % 100:02d}"]]}}' for i in range(series))
    return f'{{"status":"success","data":{{"resultType":"matrix","result":[{result}]}}}}'.encode()


def serve(port: Any, shape: str, points: int, series: int) -> None:
    shapes = ["points", "series"] if shape == "mixed" else [shape]
    bodies = [body(s, points, series) for s in shapes]
    empty = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    served = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            if "query_range" in self.path:
                payload = bodies[served[0] % len(bodies)]
                served[0] += 1
            else:
                payload = empty
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port.value = server.server_address[1]
    server.serve_forever()


def _peak_rss_mb() -> float:
    """This process's own high-water mark (VmHWM); ru_maxrss would report a large parent's RSS."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["points", "series", "mixed"], default="mixed")
    parser.add_argument("--points", type=int, default=2_000_000)
    parser.add_argument("--series", type=int, default=500_000)
    parser.add_argument("--queries", type=int, default=33, help="range queries answered big (the rest empty)")
    parser.add_argument("--max-points", type=int, default=None)
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--kill-mb", type=float, default=6000)
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())
    from telemetry import prometheus_api

    port = multiprocessing.Value("i", 0)
    server = multiprocessing.Process(target=serve, args=(port, args.shape, args.points, args.series), daemon=True)
    server.start()
    while not port.value:
        time.sleep(0.1)
    prometheus_api.SAMPLE_QUERIES = prometheus_api.SAMPLE_QUERIES[: args.queries]  # type: ignore[misc]
    options: dict[str, Any] = {"lookback_s": 3600, "step_s": 60, "timeout_s": 120}
    known = inspect.signature(prometheus_api.ingest_prometheus).parameters
    for name, value in (("max_points", args.max_points), ("budget_s", args.budget_s)):
        if value is not None and name in known:
            options[name] = value
    base_mb = _rss_mb()
    started = time.monotonic()
    peak = [base_mb]

    def watchdog() -> None:  # the server is stopped too: os._exit skips multiprocessing's cleanup
        while True:
            peak[0] = max(peak[0], _rss_mb())
            if peak[0] > args.kill_mb:
                print(json.dumps({"killed_at_mb": round(peak[0]), "after_s": round(time.monotonic() - started, 1),
                                  "start_mb": round(base_mb)}), flush=True)  # fmt: skip
                server.kill()
                os._exit(3)
            time.sleep(0.05)

    threading.Thread(target=watchdog, daemon=True).start()
    result = prometheus_api.ingest_prometheus(f"http://127.0.0.1:{port.value}", **options)
    elapsed = time.monotonic() - started
    reasons = result.rejects.filter(result.rejects["line"].is_null())["reason"].to_list()
    print(json.dumps({
        "shape": args.shape, "queries": args.queries, "options": options,
        "samples": result.samples.height, "rejects": result.rejects.height,
        "start_mb": round(base_mb), "peak_rss_mb": round(_peak_rss_mb()),
        "seconds": round(elapsed, 1), "first_reasons": sorted(set(reasons))[:3],
    }))  # fmt: skip
    server.terminate()


if __name__ == "__main__":
    main()
