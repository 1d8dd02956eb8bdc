"""A hostile drop folder: every file accepted or rejected with a one-line reason, never the run.

Issue 9: integers beyond the typed columns (CSV, Parquet UInt64, sidecars, pasted command lines,
`num_gpu_blocks`, DCGM `gpu` labels), `inf` / `nan` / `1e300`, non-ASCII digits that pass
`isdigit()`, years 1 and 9999 (values, sidecars, mtimes), deep JSON/YAML, a CSV field over the csv
module's limit, non-UTF-8 file names, links out of the folder, FIFOs, files above the size limit.
Each rejects its file or row with a reason code; the good deployment beside them is still read,
and the frames load into DuckDB. Property tests feed random bytes, random JSON/YAML trees and
random numbers to every parser.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capacity.spec import GpuSku
from models_registry.redact import MARK, redact
from models_registry.sources.gpu_catalog import load_gpu_skus
from telemetry import REASON_CODES, IngestResult, ingest_dir
from telemetry.drop_folder import fingerprint
from telemetry.files import display_name, read_bounded, walk
from telemetry.normalize import RowError, parse_int, parse_number, parse_timestamp
from tests.hostile_telemetry import GOOD, MODEL, SECRETS, TOKEN, remove_deep_folders, write_hostile_drop
from tests.test_telemetry_support import model_ids

# Examples per property test: 60 by default (the whole file runs in ~15 s); a deeper run:
# CAPPLAN_PROPERTY_EXAMPLES=2000 .venv/bin/pytest tests/test_telemetry_hostile.py -k random
EXAMPLES = int(os.environ.get("CAPPLAN_PROPERTY_EXAMPLES", "60"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@cache
def gpus() -> tuple[GpuSku, ...]:
    return tuple(load_gpu_skus())


def ingest(root: Path, **options: Any) -> IngestResult:
    return ingest_dir(root, model_ids=model_ids(), gpu_skus=gpus(), **options)


def assert_sound(result: IngestResult) -> None:
    """Reconciles; every reject has a known code, a one-line reason and names its file; the
    frames load into DuckDB (what the nightly does next)."""
    assert result.check_reconciliation() == []
    for row in result.rejects.iter_rows(named=True):
        assert row["reason_code"] in REASON_CODES, row
        assert row["reason"] and "\n" not in row["reason"], row
        assert row["file"], row
    con = duckdb.connect()
    for name in ("observations", "samples", "rejects", "files"):
        con.register("incoming", getattr(result, name))
        con.execute(f"create table {name} as select * from incoming")
        con.unregister("incoming")
    con.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str | None], IngestResult]]:
    root = tmp_path_factory.mktemp("hostile")
    try:
        expected = write_hostile_drop(root)
        yield root, expected, ingest(root / "telemetry")
    finally:
        remove_deep_folders(root)


def test_every_hostile_file_is_listed_with_its_outcome(
    hostile: tuple[Path, dict[str, str | None], IngestResult],
) -> None:
    _, expected, result = hostile
    assert_sound(result)
    files = {row["file"]: row for row in result.files.iter_rows(named=True)}
    assert set(files) == set(expected)
    codes: dict[str, list[str]] = {}
    for row in result.rejects.iter_rows(named=True):
        codes.setdefault(row["file"], []).append(row["reason_code"])
    wrong = {
        name: (code, codes.get(name, []))
        for name, code in expected.items()
        if (code not in codes.get(name, []) if code else codes.get(name))
    }
    assert wrong == {}
    assert "parse_error" not in result.rejects["reason_code"].to_list(), "every failure has a specific code"


def test_the_good_deployment_beside_them_is_read(hostile: tuple[Path, dict[str, str | None], IngestResult]) -> None:
    _, _, result = hostile
    good = result.observations.filter((pl.col("deployment_id") == GOOD) & (pl.col("source_kind") == "vllm_log"))
    assert good.height == 1 and good["model_id"][0] == MODEL and good["gpu_sku"][0] == "h100-sxm-80gb"
    assert result.samples.filter(pl.col("deployment_id") == GOOD).height > 100
    # the sidecars that failed did not take their folders' good files with them
    assert set(result.observations["deployment_id"]) >= {"deep-json", "x\\ud800y", GOOD}


def test_nothing_outside_the_drop_folder_is_read(hostile: tuple[Path, dict[str, str | None], IngestResult]) -> None:
    _, _, result = hostile
    text = "\n".join(str(v) for frame in (result.rejects, result.files, result.observations) for v in frame.rows())
    assert "root:" not in text and "/bin/" not in text  # /etc/passwd lines
    assert TOKEN not in text  # outside/secret.log holds the token


def test_file_names_that_are_not_utf8_are_shown_escaped(
    hostile: tuple[Path, dict[str, str | None], IngestResult],
) -> None:
    _, _, result = hostile
    assert "names/bad-\\xff\\xfe.log" in result.files["file"].to_list()
    assert display_name(os.fsdecode(b"a\xffb")) == "a\\xffb"
    assert result.observations.filter(pl.col("deployment_id") == "x\\ud800y").height == 1  # JSON's lone surrogate


def test_the_sensor_fingerprint_neither_follows_links_nor_hangs(
    hostile: tuple[Path, dict[str, str | None], IngestResult],
) -> None:
    root, expected, _ = hostile
    prints = fingerprint(root / "telemetry")
    assert set(prints) == set(expected)
    assert prints["special/pipe.prom"].startswith("not_a_file")
    assert prints["special/passwd.log"].startswith("outside_folder")
    assert prints["special/huge.log"].startswith("too_large")
    assert len(prints[f"{GOOD}/startup.log"]) == 64


def test_reads_are_bounded_on_the_open_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"x" * 1000)
    assert read_bounded(path, 1000)[0] == b"x" * 1000
    with pytest.raises(RowError) as info:
        read_bounded(path, 999)
    assert info.value.code == "too_large"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RowError) as info:
        read_bounded(tmp_path / "fifo")  # would block forever if opened for a blocking read
    assert info.value.code == "not_a_file"
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(RowError):
        read_bounded(tmp_path / "link")  # O_NOFOLLOW: walk() resolves links, read_bounded never follows one
    result = ingest(tmp_path, max_file_bytes=999)
    assert result.rejects.filter(pl.col("file") == "a.log")["reason_code"].to_list() == ["too_large"]


def test_links_inside_the_folder_are_followed_links_out_are_not(tmp_path: Path) -> None:
    drop = tmp_path / "drop"
    (drop / "real").mkdir(parents=True)
    (drop / "real" / "m.prom").write_text(
        f'# scraped_at: 2025-06-02T00:00:00Z\nvllm:num_requests_running{{model_name="{MODEL}"}} 3\n', encoding="utf-8"
    )
    (drop / "alias").mkdir()
    (drop / "alias" / "m.prom").symlink_to("../real/m.prom")
    (drop / "dirlink").symlink_to("real")
    (tmp_path / "out.prom").write_text("vllm:num_requests_running 1\n", encoding="utf-8")
    (drop / "out.prom").symlink_to(tmp_path / "out.prom")
    found = {f.rel: f for f in walk(drop)}
    assert found["alias/m.prom"].problem is None and found["alias/m.prom"].path == (drop / "real" / "m.prom").resolve()
    assert found["dirlink"].problem is not None and found["dirlink"].problem.code == "not_a_file"
    assert found["out.prom"].problem is not None and found["out.prom"].problem.code == "outside_folder"
    result = ingest(drop)
    assert_sound(result)
    # the link is read like the file it points to (the first of the two in path order wins; the
    # other is a duplicate of it)
    assert result.rejects.filter(pl.col("file") == "real/m.prom")["reason_code"].to_list() == ["duplicate"]
    assert result.samples["file"].to_list() == ["alias/m.prom"]


def test_parquet_bombs_are_refused_from_their_footer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 13 KB Parquet file of 2,000,000 dictionary-encoded rows, and one that decompresses to more
    than the limit, are rejected before a row is decoded."""
    import telemetry.tabular as tabular

    rows = 2_000_000
    pl.DataFrame({"deployment_id": ["d"] * rows, "model": [MODEL] * rows}).write_parquet(tmp_path / "rows.parquet")
    wide = {"deployment_id": [str(i) for i in range(20_000)], "model": [f"m{i}" * 300 for i in range(20_000)]}
    pl.DataFrame(wide).write_parquet(tmp_path / "wide.parquet")
    monkeypatch.setattr(tabular, "MAX_PARQUET_UNPACKED_BYTES", 10 << 20)
    result = ingest(tmp_path)
    assert_sound(result)
    assert result.rejects.select("file", "reason_code").rows() == [
        ("rows.parquet", "too_large"),
        ("wide.parquet", "too_large"),
    ]


# --- numbers and times ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("99999999999999999999", "out_of_range"),
        ("9" * 5000, "out_of_range"),
        ("1e300", "out_of_range"),
        ("inf", "not_finite"),
        ("-Infinity", "not_finite"),
        ("nan", "not_finite"),
        ("\u0661\u0662\u0663", "bad_value"),  # Arabic-Indic digits: '١٢٣'.isdigit() is True
        ("\u00b2", "bad_value"),  # '²'.isdigit() is True, int('²') raises
        ("\uff11\uff12", "bad_value"),  # fullwidth digits
        ("12.5", "bad_value"),
    ],
)
def test_integers_are_ascii_and_range_checked(text: str, code: str) -> None:
    with pytest.raises(RowError) as info:
        parse_int(text, "value")
    assert info.value.code == code


def test_numbers_that_fit_are_read() -> None:
    assert parse_int("1,024", "x") == 1024 and parse_int("4096.0", "x") == 4096 and parse_int(2**62, "x") == 2**62
    assert parse_number("0.9", "x") == 0.9 and parse_number("-3e2", "x") == -300
    with pytest.raises(RowError):
        parse_int(2**64 - 1, "x")  # a Parquet UInt64


@pytest.mark.parametrize(
    "value", ["0001-01-01", "9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+05:00", "1999-12-31T23:59:59Z", 1e300, -1]
)
def test_timestamps_outside_2000_2100_are_rejected(value: object) -> None:
    with pytest.raises(RowError) as info:
        parse_timestamp(value)
    assert info.value.code == "bad_timestamp"


# --- secrets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"docker run -e HF_TOKEN={TOKEN} vllm/vllm-openai", TOKEN),
        (f"non-default args: {{'hf_token': '{TOKEN}', 'model': 'x'}}", TOKEN),
        (f'"hf_token": "{TOKEN}"', TOKEN),
        ("export HUGGING_FACE_HUB_TOKEN=abcdef123456", "abcdef123456"),
        ("curl -H 'Authorization: Bearer abc.def-123'", "abc.def-123"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
        ("token=Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlMTIz", "eyJhbGciOiJIUzI1NiJ9"),
        ("vllm serve m --api-key sk-proj-abcdefghijklmnop", "sk-proj-abcdefghijklmnop"),
        ("OPENAI_API_KEY=sk-abcdefghijklmnopqrst", "sk-abcdefghijklmnopqrst"),
        ("api_key=abcd1234; password: hunter2", "hunter2"),
        ("api_key=abcd1234; password: hunter2", "abcd1234"),
        ("postgresql://capplan:s3cr3t@db:5432/fleet", "s3cr3t"),
        ("https://user:pa55@example.com/x", "pa55"),
        ("aws AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
        ("GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
        ("--hf-token hf_abcdefghijklmnop", "hf_abcdefghijklmnop"),
    ],
)
def test_secrets_are_redacted(text: str, secret: str) -> None:
    redacted = redact(text)
    assert secret not in redacted and MARK in redacted


@pytest.mark.parametrize(
    "text",
    [
        "Chunked prefill is enabled with max_num_batched_tokens=8192.",
        "GPU KV cache size: 123,456 tokens",
        "Maximum concurrency for 8192 tokens per request: 3.2x",
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --tokenizer x --max-num-batched-tokens 8192",
        "Using max model len 32768",
        'vllm:cache_config_info{block_size="16",cache_dtype="auto"} 1',
    ],
)
def test_telemetry_lines_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_no_secret_reaches_a_frame(hostile: tuple[Path, dict[str, str | None], IngestResult]) -> None:
    _, _, result = hostile
    for frame in (result.observations, result.samples, result.rejects, result.files):
        buffer = io.BytesIO()
        frame.write_csv(buffer)
        for secret in SECRETS:
            assert secret.encode() not in buffer.getvalue()
    leaky = result.rejects.filter(pl.col("file") == "logs/leaky.log")
    assert leaky.height and all(MARK in (r or "") for r in leaky["raw_excerpt"])


# --- predictions: settings within range but absurd ----------------------------------------------


def test_absurd_settings_are_skipped_with_a_reason_never_raised(tmp_path: Path) -> None:
    """Values that pass the range checks (TP 1,024, 2^50 blocks and tokens) still reach the capacity
    engine: each deployment is predicted or skipped with why, and the frames hold every row."""
    from models_registry.planning import bundled_catalog
    from telemetry.calibration_frames import fit_frames
    from telemetry.drop_folder import deployments_frame
    from telemetry.predictions import PREDICTION_SCHEMA, predict_deployments

    big = 2**50
    header = "deployment_id,model,gpu,tp,pp,max_model_len,block_size,num_gpu_blocks,kv_cache_memory_bytes,"
    header += "gpu_memory_utilization,max_num_seqs,max_num_batched_tokens,total_gpu_memory_bytes,max_concurrency_tokens"
    rows = [
        f"a,{MODEL},h100-sxm-80gb,1024,1024,{big},{2**20},{big},,0.9,{big},{big},,{big}",
        f"b,{MODEL},h100-sxm-80gb,1,1,{big},1,{big},{2**36},1.0,1,1,,1",
        f"c,{MODEL},,1,1,1,1,1,,0.0001,1,1,{big},1",
        f"d,{MODEL},l4-24gb,1,1,{big},{2**20},{big},1,0.9,{big},1,,{big}",
    ]
    (tmp_path / "x.csv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    catalog = bundled_catalog([MODEL], ["h100-sxm-80gb", "l4-24gb"])
    result = ingest_dir(tmp_path, model_ids=catalog.model_ids(), gpu_skus=list(catalog.gpus.values()))
    assert_sound(result)
    deployments = deployments_frame(result.observations, result.samples, "drop_folder")
    predictions = predict_deployments(deployments, catalog)
    assert dict(predictions.schema) == PREDICTION_SCHEMA and predictions.height == deployments.height == 4
    assert all(predictions["prediction_reason"].filter(predictions["prediction_status"] == "skipped"))
    per_deployment = fit_frames(deployments, predictions, catalog, min_observations=1)[1]
    assert per_deployment.height == (predictions["prediction_status"] == "predicted").sum()


# --- property tests: every parser, random input --------------------------------------------------

PARSER_FILES = ("m.prom", "s.log", "e.csv", "e.parquet", "x.txt", "deployment.yaml", "d.meta.json", "noext")


@PROPERTY
@given(name=st.sampled_from(PARSER_FILES), content=st.binary(max_size=4096))
def test_random_bytes_to_every_parser(tmp_path_factory: pytest.TempPathFactory, name: str, content: bytes) -> None:
    root = tmp_path_factory.mktemp("bytes")
    (root / name).write_bytes(content)
    if name.startswith("d.meta"):
        (root / "d").write_bytes(content[::-1])
    result = ingest(root)
    assert_sound(result)
    assert "parse_error" not in result.rejects["reason_code"].to_list()


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
TREES = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=40,
)
SIDECAR_KEYS = ("deployment_id", "model", "gpu", "tp", "pp", "engine", "engine_version", "observed_at", "notes", "x")


@PROPERTY
@given(
    tree=st.one_of(TREES, st.dictionaries(st.sampled_from(SIDECAR_KEYS), TREES, max_size=6)),
    as_json=st.booleans(),
    depth=st.integers(min_value=0, max_value=60),
)
def test_random_json_and_yaml_trees_as_sidecars(
    tmp_path_factory: pytest.TempPathFactory, tree: object, as_json: bool, depth: int
) -> None:
    root = tmp_path_factory.mktemp("trees")
    for _ in range(depth):
        tree = {"notes": [tree]}
    try:
        text = json.dumps(tree) if as_json else yaml.safe_dump(tree, allow_unicode=True)
    except (RecursionError, ValueError):
        return
    (root / "dep").mkdir()
    sidecar = root / "dep" / ("deployment.json" if as_json else "deployment.yaml")
    sidecar.write_text(text, encoding="utf-8", errors="surrogatepass")
    (root / "dep" / "m.prom").write_text(
        f'# scraped_at: 2025-06-02T00:00:00Z\nvllm:num_requests_running{{model_name="{MODEL}"}} 3\n', encoding="utf-8"
    )
    result = ingest(root)
    assert_sound(result)
    assert "parse_error" not in result.rejects["reason_code"].to_list()


NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.integers(min_value=0, max_value=64).map(lambda n: "9" * n),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["inf", "-inf", "nan", "NaN", "+Inf", "1e300", "1e-300", "1_000", "1,024", "32k", "32K", "0x10"]),
    st.text(alphabet="0123456789\u0660\u0661\u0662\u00b2\u00b3\uff11\u0966\u09e7.,-+eE_", min_size=1, max_size=12),
)
TEMPLATES = {
    "m.prom": (
        "# scraped_at: {n0}\n"
        'vllm:kv_cache_usage_perc{{model_name="' + MODEL + '",engine="{n1}"}} {n2} {n3}\n'
        'vllm:cache_config_info{{model_name="' + MODEL + '",num_gpu_blocks="{n4}",block_size="{n5}",'
        'gpu_memory_utilization="{n6}"}} 1\n'
        'DCGM_FI_DEV_FB_USED{{gpu="{n7}",modelName="NVIDIA H100 80GB HBM3"}} {n8}\n'
    ),
    "s.log": (
        "# observed_at: {n0}\n"
        "$ vllm serve " + MODEL + " --tensor-parallel-size {n1} --max-model-len {n2} --gpu-memory-utilization {n3}\n"
        "INFO [x.py:1] Model loading took {n4} GiB and 3 seconds\n"
        "INFO [x.py:1] # GPU blocks: {n5}, # CPU blocks: {n6}\n"
        "INFO [x.py:1] Maximum concurrency for {n7} tokens per request: {n8}x\n"
        "INFO [x.py:1] non-default args: {{'model': '"
        + MODEL
        + "', 'tensor_parallel_size': {n1}, 'block_size': {n6}}}\n"
    ),
    "e.csv": (
        "deployment_id,model,tp,pp,num_gpu_blocks,max_concurrency,weights_gib,gpu_memory_utilization,observed_at\n"
        "d1," + MODEL + ",{n0},{n1},{n2},{n3},{n4},{n5},{n6}\n"
    ),
    "deployment.yaml": "tp: {n0}\npp: {n1}\nobserved_at: {n2}\nengine_version: {n3}\n",
}


@PROPERTY
@given(name=st.sampled_from(sorted(TEMPLATES)), numbers=st.lists(NUMBERS, min_size=9, max_size=9))
def test_random_numbers_in_every_parser(
    tmp_path_factory: pytest.TempPathFactory, name: str, numbers: list[str]
) -> None:
    root = tmp_path_factory.mktemp("numbers")
    text = TEMPLATES[name].format(**{f"n{i}": n for i, n in enumerate(numbers)})
    (root / name).write_text(text, encoding="utf-8")
    if name == "deployment.yaml":
        (root / "s.log").write_text(TEMPLATES["s.log"].format(**dict.fromkeys(map("n{}".format, range(9)), "1")))
    result = ingest(root)
    assert_sound(result)
    assert "parse_error" not in result.rejects["reason_code"].to_list()


PARQUET_VALUES = st.one_of(
    st.integers(min_value=0, max_value=2**64 - 1).map(lambda v: pl.Series([v], dtype=pl.UInt64)),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda v: pl.Series([v], dtype=pl.Int64)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: pl.Series([v], dtype=pl.Float64)),
    st.text(max_size=20).map(lambda v: pl.Series([v], dtype=pl.String)),
)


@PROPERTY
@given(columns=st.dictionaries(st.sampled_from(["tp", "num_gpu_blocks", "max_concurrency", "weights_bytes", "observed_at",
                                               "block_size", "max_model_len", "peak_kv_usage"]), PARQUET_VALUES,
                               max_size=5))  # fmt: skip
def test_random_numbers_in_parquet_exports(
    tmp_path_factory: pytest.TempPathFactory, columns: dict[str, pl.Series]
) -> None:
    root = tmp_path_factory.mktemp("parquet")
    frame = pl.DataFrame({"deployment_id": pl.Series(["d"]), "model": pl.Series([MODEL]), **columns})
    frame.write_parquet(root / "e.parquet")
    result = ingest(root)
    assert_sound(result)
    assert "parse_error" not in result.rejects["reason_code"].to_list()
    if result.observations.height:
        for value in result.observations.select(pl.col(pl.Float64)).row(0):
            assert value is None or (math.isfinite(value) and abs(value) <= 2**53)


def test_reason_codes_are_documented() -> None:
    readme = (Path(__file__).resolve().parent.parent / "telemetry" / "README.md").read_text()
    missing = [code for code in REASON_CODES if f"`{code}`" not in readme]
    assert missing == []


# --- the real nightly on the hostile folder ------------------------------------------------------


@pytest.fixture(scope="module")
def hostile_nightly(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str | None], str]]:
    """`capplan nightly` (the Dagster job, a persistent instance under var/dagster) run from a
    fresh directory on a small catalog, with the hostile folder as CAPPLAN_TELEMETRY_DIR."""
    from typer.testing import CliRunner

    from pipelines.cli import app
    from tests.test_warehouse_fixtures import write_catalog

    root = tmp_path_factory.mktemp("hostile-nightly")
    try:
        expected = write_hostile_drop(root)
        catalog = write_catalog(root / "catalog", (MODEL,), ("h100-sxm-80gb", "l4-24gb"))
        env = {
            "CAPPLAN_REGISTRY_URL": f"sqlite:///{root / 'var' / 'registry.db'}",
            "CAPPLAN_WAREHOUSE": str(root / "var" / "warehouse.duckdb"),
            "CAPPLAN_CATALOG_DIR": str(catalog),
            "CAPPLAN_TELEMETRY_DIR": str(root / "telemetry"),
        }
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(root)
            patch.delenv("DAGSTER_HOME", raising=False)
            for name, value in env.items():
                patch.setenv(name, value)
            result = CliRunner().invoke(app, ["nightly"])
        assert result.exit_code == 0, result.output
        yield root, expected, result.output
    finally:
        remove_deep_folders(root)


@pytest.mark.slow  # a whole nightly of its own (the slow group holds those)
def test_a_hostile_drop_folder_still_publishes_a_nightly(
    hostile_nightly: tuple[Path, dict[str, str | None], str],
) -> None:
    """Done-when of issue 9: every file of the hostile folder is in marts.telemetry_files with its
    outcome, and the good deployment beside them is predicted."""
    root, expected, _ = hostile_nightly
    con = duckdb.connect(str(root / "var" / "warehouse.duckdb"), read_only=True)
    try:
        files = {
            r[0]: r[1:]
            for r in con.execute("select file, rows_in, accepted, rejected from marts.telemetry_files").fetchall()
        }
        rejects = con.execute("select file, reason_code from marts.telemetry_rejects").fetchall()
        predicted = con.execute(
            "select prediction_status from marts.prediction_vs_measured where deployment_id = $d", {"d": GOOD}
        ).fetchall()
    finally:
        con.close()
    assert set(files) == set(expected)
    assert all(rows_in == accepted + rejected for rows_in, accepted, rejected in files.values())
    codes: dict[str, set[str]] = {}
    for name, code in rejects:
        codes.setdefault(name, set()).add(code)
    assert {name for name, code in expected.items() if code and code not in codes.get(name, set())} == set()
    assert predicted == [("predicted",)]


@pytest.mark.slow  # shares the whole nightly above
def test_no_planted_secret_in_any_output_or_file_under_var(
    hostile_nightly: tuple[Path, dict[str, str | None], str],
) -> None:
    """The tokens planted in a pasted log (and in a file outside the folder that a link points to)
    appear nowhere: not in the nightly's output, not in any byte of any file under var/ (the
    DuckDB warehouse, the registry, Dagster's run and event storage, compute logs)."""
    root, _, output = hostile_nightly
    for secret in SECRETS:
        assert secret not in output
    files = [p for p in (root / "var").rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.name == "warehouse.duckdb" for p in files)
    assert any("dagster" in p.parts for p in files), "the run is recorded in a persistent Dagster instance"
    leaks = [
        (str(p.relative_to(root)), secret)
        for p in files
        for secret in SECRETS
        if secret.encode() in p.read_bytes() or secret.encode("utf-16-le") in p.read_bytes()
    ]
    assert leaks == []
    # ... and the redacted line did arrive, so the test is not vacuous
    con = duckdb.connect(str(root / "var" / "warehouse.duckdb"), read_only=True)
    try:
        excerpts = [
            r[0]
            for r in con.execute(
                "select raw_excerpt from marts.telemetry_rejects where file = 'logs/leaky.log'"
            ).fetchall()
        ]
    finally:
        con.close()
    assert excerpts and all(MARK in e for e in excerpts)
