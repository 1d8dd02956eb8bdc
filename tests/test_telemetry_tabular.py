"""CSV and Parquet exports: documented columns, units in the names, aliases, malformed rows."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import polars as pl

from tests.test_telemetry_support import FIXTURES, MIB, gib, ingest, observations, rejects

HEADER = "deployment_id,model,gpu,tp,weights_gib,kv_cache_memory_gib,peak_kv_usage\n"


def test_documented_columns(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "exports" / "fleet_export.csv", tmp_path / "fleet_export.csv")
    result = ingest(tmp_path)
    assert result.rejects.is_empty()
    chat, rag = observations(result)
    assert chat["observed_at"] == dt.datetime(2025, 6, 2, tzinfo=dt.UTC) and chat["observed_at_source"] == "column"
    assert (chat["model_id"], chat["gpu_sku"], chat["tp"], chat["engine_version"]) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "h100-sxm-80gb",
        1,
        "0.11.0",
    )
    assert chat["weights_bytes"] == gib(14.99) and chat["fb_used_bytes"] == 74120 * MIB
    assert (chat["num_gpu_blocks"], chat["kv_cache_tokens"], chat["max_concurrency"]) == (27913, 446608, 13.63)
    assert rag["model_id"] == "meta-llama/Llama-3.1-70B-Instruct" and rag["engine_version"] == "0.10.2"
    assert (rag["weight_dtype"], rag["kv_cache_dtype"], rag["preemptions_total"]) == ("bfloat16", "fp8", 112)
    files = result.files.row(0, named=True)
    assert files["notes"] == "ignored columns: owner"
    assert (files["rows_in"], files["accepted"], files["lines_ignored"]) == (2, 2, 2)  # comment + header


def test_malformed_rows(tmp_path: Path) -> None:
    rows = [
        "a,meta-llama/Llama-3.1-8B-Instruct,H100,1,14.99,54.5,0.93",  # 2 ok
        "b,meta-llama/Llama-3.1-8B-Instruct,H100,1,14.99",  # 3 truncated
        "c,meta-llama/Llama-3.1-8B-Instruct,H100,one,14.99,54.5,0.9",  # 4 not a number
        "d,meta-llama/Llama-3.1-8B-Instruct,H100,1,-14.99,54.5,0.9",  # 5 negative
        "e,acme/secret-13b,H100,1,14.99,54.5,0.9",  # 6 unknown model
        "f,meta-llama/Llama-3.1-8B-Instruct,TPU v5e,1,14.99,54.5,0.9",  # 7 unknown GPU
        "g,meta-llama/Llama-3.1-8B-Instruct,H100,1,14.99,54.5,93",  # 8 a percent
        ",meta-llama/Llama-3.1-8B-Instruct,H100,1,14.99,54.5,0.9",  # 9 no deployment id
        "a,meta-llama/Llama-3.1-8B-Instruct,H100,1,14.99,54.5,0.93",  # 10 duplicate of 2
        "h,meta-llama/Llama-3.1-8B-Instruct,H100,1,14.99,54500,0.9",  # 11 MiB in a GiB column
        "i,meta-llama/Llama-3.1-8B-Instruct,H100,0,14.99,54.5,0.9",  # 12 tp 0
    ]
    result = ingest(tmp_path, {"export.csv": HEADER + "\n".join(rows) + "\n"})
    assert [(line, code) for _, line, code in rejects(result)] == [
        (3, "malformed"),
        (4, "bad_value"),
        (5, "negative"),
        (6, "unknown_model"),
        (7, "unknown_gpu"),
        (8, "wrong_unit"),
        (9, "missing_field"),
        (10, "duplicate"),
        (11, "out_of_range"),
        (12, "out_of_range"),
    ]
    assert result.observations["deployment_id"].to_list() == ["a"]
    assert "tp: 'one' is not a number" in result.rejects["reason"][1]


def test_settings_only_row_is_accepted(tmp_path: Path) -> None:
    result = ingest(
        tmp_path,
        {"inventory.csv": "deployment,model_name,gpu_type,tensor_parallel_size\nx,Qwen/Qwen2.5-7B-Instruct,L40S,2\n"},
    )
    (obs,) = observations(result)
    assert (obs["deployment_id"], obs["model_id"], obs["gpu_sku"], obs["tp"]) == (
        "x",
        "Qwen/Qwen2.5-7B-Instruct",
        "l40s-48gb",
        2,
    )


def test_parquet_export(tmp_path: Path) -> None:
    table = pl.DataFrame(
        {
            "deployment_id": ["p1", "p2"],
            "observed_at": [dt.datetime(2025, 6, 2, 1, tzinfo=dt.UTC)] * 2,
            "model": ["google/gemma-2-9b-it", "nobody/nothing"],
            "gpu": ["L4", "L4"],
            "tp": [1, 1],
            "kv_cache_memory_bytes": [3_000_000_000, 3_000_000_000],
            "max_concurrency": [2.5, 2.5],
        }
    )
    table.write_parquet(tmp_path / "export.parquet")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    result = ingest(tmp_path)
    (obs,) = observations(result)
    assert (obs["model_id"], obs["kv_cache_memory_bytes"], obs["source_kind"]) == (
        "google/gemma-2-9b-it",
        3_000_000_000,
        "parquet",
    )
    assert rejects(result) == [("broken.parquet", None, "malformed"), ("export.parquet", 2, "unknown_model")]
