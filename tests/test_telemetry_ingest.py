"""The drop folder: file kinds, encodings, sidecars, frame schemas, and reconciliation
(rows in = accepted + rejected) on arbitrary input."""

from __future__ import annotations

import string
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry import (
    ENV_VAR,
    FILE_SCHEMA,
    OBSERVATION_SCHEMA,
    REASON_CODES,
    REJECT_SCHEMA,
    SAMPLE_SCHEMA,
    default_drop_dir,
    ingest_dir,
)
from tests.test_telemetry_support import ingest, model_ids, observations, rejects

LOG = (
    "vllm serve meta-llama/Llama-3.1-8B-Instruct\n"
    "INFO 10-14 08:04:19 [gpu_worker.py:298] Available KV cache memory: 56.12 GiB\n"
)
PROM = (
    '# scraped_at: 2025-06-02T14:00:00Z\nvllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 3\n'
)


def test_missing_folder_gives_empty_frames_with_the_schemas(tmp_path: Path) -> None:
    result = ingest_dir(tmp_path / "nothing", model_ids=model_ids())
    assert dict(result.observations.schema) == OBSERVATION_SCHEMA
    assert dict(result.samples.schema) == SAMPLE_SCHEMA
    assert dict(result.rejects.schema) == REJECT_SCHEMA
    assert dict(result.files.schema) == FILE_SCHEMA
    assert result.summary() == dict.fromkeys(("files", "rows_in", "accepted", "rejected", "observations", "samples"), 0)


def test_default_drop_dir(monkeypatch: object) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)  # type: ignore[attr-defined]
    assert default_drop_dir() == Path("var/telemetry")
    monkeypatch.setenv(ENV_VAR, "/srv/telemetry")  # type: ignore[attr-defined]
    assert default_drop_dir() == Path("/srv/telemetry")


def test_whole_file_rejects_and_ignored_files(tmp_path: Path) -> None:
    result = ingest(
        tmp_path,
        {
            "empty.log": "",
            "blank.prom": "\n  \n",
            "binary.log": b"\x00\x01\x02PK\x03\x04" * 20,
            "notes.txt": "remember to buy milk\n",
            "dump.json": '{"a": 1}',
            "README.md": "# what this folder is\n",
            ".DS_Store": b"\x00\x00",
        },
    )
    codes = {file: code for file, _, code in rejects(result)}
    assert codes == {
        "empty.log": "empty",
        "blank.prom": "empty",
        "binary.log": "encoding",
        "notes.txt": "unknown_file_type",
        "dump.json": "unknown_file_type",
    }
    kinds = dict(zip(result.files["file"], result.files["source_kind"], strict=True))
    assert kinds["README.md"] == kinds[".DS_Store"] == "ignored"
    assert result.files.filter(pl.col("source_kind") == "ignored")["rows_in"].to_list() == [0, 0]
    assert set(result.rejects["reason_code"]) <= set(REASON_CODES)


def test_encodings(tmp_path: Path) -> None:
    latin1 = PROM + 'vllm:num_requests_waiting{model_name="caf\xe9"} 1\n'
    result = ingest(
        tmp_path,
        {
            "a/startup.log": LOG.encode("utf-16"),  # PowerShell `>` writes UTF-16 with a BOM
            "b/metrics.prom": latin1.encode("latin-1"),
            "c/startup.log": b"\xef\xbb\xbf" + LOG.replace("56.12", "55.00").encode(),
        },
    )
    assert rejects(result) == [("b/metrics.prom", 3, "encoding")]
    assert result.samples.height == 1 and len(observations(result)) == 2
    encodings = dict(zip(result.files["file"], result.files["encoding"], strict=True))
    assert encodings["a/startup.log"] == "utf-16" and encodings["b/metrics.prom"].startswith("utf-8 (with")


def test_sniffing_text_files(tmp_path: Path) -> None:
    result = ingest(tmp_path, {"d/paste.txt": LOG, "d/scrape.txt": PROM})
    kinds = dict(zip(result.files["file"], result.files["source_kind"], strict=True))
    assert kinds == {"d/paste.txt": "vllm_log", "d/scrape.txt": "prometheus"}
    assert result.rejects.is_empty()


def test_sidecars(tmp_path: Path) -> None:
    result = ingest(
        tmp_path,
        {
            "team/deployment.yaml": "deployment_id: chat-prod\ngpu: NVIDIA H100 80GB HBM3\nengine_version: 0.11.0\n",
            "team/startup.log": LOG,
            "team/sub/startup.log": LOG.replace("56.12", "50.00"),
            "other/deployment.yaml": "deployment_id: x\ngpu_type: H100\n",
            "other/startup.log": LOG.replace("56.12", "40.00"),
            "bad/deployment.yaml": "gpu: [unclosed\n",
            "worse/deployment.yml": "gpu: TPU v5e\n",
        },
    )
    codes = {file: code for file, _, code in rejects(result)}
    assert codes == {
        "bad/deployment.yaml": "bad_sidecar",
        "other/deployment.yaml": "bad_sidecar",
        "worse/deployment.yml": "unknown_gpu",
    }
    by_file = {o["file"]: o for o in observations(result)}
    assert by_file["team/startup.log"]["deployment_id"] == "chat-prod"
    assert by_file["team/sub/startup.log"]["deployment_id"] == "chat-prod"  # folder sidecars apply below
    assert by_file["team/startup.log"]["gpu_sku"] == "h100-sxm-80gb"
    assert by_file["team/startup.log"]["engine_version"] == "0.11.0"
    assert by_file["other/startup.log"]["deployment_id"] == "other"  # the folder name, sidecar rejected
    sidecars = result.files.filter(pl.col("source_kind") == "sidecar")
    assert sidecars["rows_in"].to_list() == [1, 1, 1, 1]
    assert sidecars["accepted"].sum() == 1


def test_deployment_id_conventions(tmp_path: Path) -> None:
    result = ingest(
        tmp_path,
        {
            "top-level.log": LOG,
            "folder/startup.log": LOG.replace("56.12", "1.00"),
            "labelled.prom": PROM.replace("{", '{deployment="from-label",'),
            "directive.prom": "# deployment_id: from-comment\n" + PROM.replace(" 3", " 4"),
        },
    )
    assert sorted(result.observations["deployment_id"]) == ["folder", "top-level"]
    assert sorted(result.samples["deployment_id"]) == ["from-comment", "from-label"]


# --- reconciliation on arbitrary input ---------------------------------------------------------

_VALID_LINES = [
    'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3',
    'vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.5',
    'DCGM_FI_DEV_FB_USED{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 70000',
    "# scraped_at: 2025-06-02T14:00:00Z",
    "Model loading took 14.99 GiB and 4.1 seconds",
    "Available KV cache memory: 56.12 GiB",
    "Maximum concurrency for 8,192 tokens per request: 1",
    "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size 2",
    "deployment_id,model,kv_cache_memory_gib",
    "x,meta-llama/Llama-3.1-8B-Instruct,50",
]
_garbage = st.text(alphabet=string.printable + "█é{}\"',=#:", max_size=80).map(lambda s: s.replace("\r", ""))
_line = st.one_of(
    _garbage, st.sampled_from(_VALID_LINES), st.sampled_from(_VALID_LINES).map(lambda s: s[: len(s) // 2])
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(
        st.tuples(st.sampled_from([".prom", ".log", ".csv", ".txt"]), st.lists(_line, max_size=25)),
        min_size=1,
        max_size=4,
    ),
    raw=st.binary(max_size=64),
)
def test_rows_in_equals_accepted_plus_rejected(
    tmp_path_factory: object, files: list[tuple[str, list[str]]], raw: bytes
) -> None:
    root = tmp_path_factory.mktemp("drop")  # type: ignore[attr-defined]
    for i, (suffix, lines) in enumerate(files):
        (root / f"d{i}").mkdir()
        (root / f"d{i}" / f"f{suffix}").write_text("\n".join(lines), encoding="utf-8")
    (root / "raw.log").write_bytes(raw)
    result = ingest_dir(root, model_ids=model_ids())
    assert result.check_reconciliation() == []
    summary = result.summary()
    assert summary["rows_in"] == summary["accepted"] + summary["rejected"] == sum(result.files["rows_in"])
    assert summary["rejected"] == result.rejects.height
    assert result.files.height == len(files) + 1
    assert set(result.rejects["reason_code"]) <= set(REASON_CODES)
    assert result.rejects["reason"].null_count() == 0
