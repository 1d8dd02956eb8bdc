"""Accuracy studies: capplan's predictions scored against public measurements.

The reference data (startup logs of vLLM, SGLang and TensorRT-LLM; throughput and latency
benchmarks; CUDA-graph estimates) lives in `data/` with a README per set; `tools/` runs the studies.
Fitted constants are written into `capacity` as code, so the planner never reads these files.

- `measurements`: vLLM startup logs and capplan's prediction of each.
- `overhead_cv`, `cudagraph_estimates`: leave-one-source-out scores of the overhead terms.
- `engine_logs`: the SGLang and TensorRT-LLM profiles on their public logs.
- `perf_measurements`, `perf_cv`: the performance model against public benchmarks.
"""
