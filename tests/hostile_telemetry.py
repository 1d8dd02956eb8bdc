"""A hostile telemetry drop folder: every malformed kind issue 9 lists, next to a good deployment
(no tests here; used by test_telemetry_hostile.py and the nightly leak test).

`write_hostile_drop(root)` writes it and returns {file as `marts.telemetry_files` names it:
the reason code its rejects carry, or None for a file that must be accepted}. Files with a
mixture name the code that has to be among their rejects.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from models_registry.walk import MAX_DEPTH
from telemetry import SAMPLE_DIR
from telemetry.schema import clean_text

# A planted secret: must never appear in anything capplan stores or prints.
TOKEN = "hf_PlantedSecretTokenDoNotStore0123456789"
API_KEY = "sk-proj-PlantedApiKeyDoNotStore0123"
PASSWORD = "PlantedPassw0rdDoNotStore"
SECRETS = (TOKEN, API_KEY, PASSWORD)

GOOD = "chat-llama8b-h100"  # a SAMPLE deployment copied as it is: it must still be predicted
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LOG_HEAD = f"$ vllm serve {MODEL}\n"
LOG_KV = "INFO 10-14 08:04:19 [gpu_worker.py:298] Available KV cache memory: 56.12 GiB\n"
PROM_HEAD = "# scraped_at: 2025-06-02T14:00:00Z\n"
CSV_HEAD = "deployment_id,model,gpu,tp,num_gpu_blocks,max_concurrency,max_model_len,observed_at\n"
VLLM_RUNNING = f'vllm:num_requests_running{{model_name="{MODEL}"}}'
DCGM = 'DCGM_FI_DEV_FB_USED{{gpu="{gpu}",modelName="NVIDIA H100 80GB HBM3"}} 1000'


def _csv(row: str) -> str:
    return CSV_HEAD + row + "\n"


def _parquet(columns: dict[str, pl.Series]) -> bytes:
    buffer = io.BytesIO()
    pl.DataFrame(columns).write_parquet(buffer)
    return buffer.getvalue()


def _laughs(levels: int) -> str:
    """YAML aliases nine times over per level: 9**levels values from a few hundred bytes."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ",".join([f"*a{level - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _deep_json(depth: int) -> str:
    return '{"deployment_id": "deep", "notes": ' + "[" * depth + "]" * depth + "}"


LEAKY_LOG = (
    f"$ HF_TOKEN={TOKEN} vllm serve {MODEL} --api-key {API_KEY} --tensor-parallel-size 1\n"
    f"INFO 10-14 08:04:10 [api_server.py:1] non-default args: {{'model': '{MODEL}', 'hf_token': '{TOKEN}'}}\n"
    f"INFO 10-14 08:04:11 [x.py:1] Authorization: Bearer {TOKEN}\n"
    f"INFO 10-14 08:04:12 [x.py:1] connecting to postgresql://capplan:{PASSWORD}@db:5432/fleet\n"
    + LOG_KV
    + f"INFO 10-14 08:04:20 [gpu_worker.py:1] GPU KV cache size: {TOKEN} tokens\n"
)

# name -> (content, expected reason code among the file's rejects; None = accepted without rejects)
CONTENT: dict[str, tuple[str | bytes, str | None]] = {
    # CSV: integers beyond the typed columns, non-finite and huge floats, non-ASCII digits, years 1 / 9999
    "csv/tp-overflow.csv": (_csv(f"c1,{MODEL},,99999999999,100,1.5,4096,2025-06-02T00:00:00Z"), "out_of_range"),
    "csv/blocks-overflow.csv": (_csv(f"c2,{MODEL},,1,99999999999999999999999,1.5,4096,"), "out_of_range"),
    "csv/inf.csv": (_csv(f"c3,{MODEL},,1,100,inf,4096,"), "not_finite"),
    "csv/nan.csv": (_csv(f"c4,{MODEL},,1,100,nan,4096,"), None),  # 'nan' is how exports write null
    "csv/1e300.csv": (_csv(f"c5,{MODEL},,1,100,1e300,4096,"), "out_of_range"),
    "csv/arabic-digits.csv": (_csv(f"c6,{MODEL},,1,100,1.5,\u0664\u0660\u0669\u0666,"), "bad_value"),
    "csv/superscript.csv": (_csv(f"c7,{MODEL},,\u00b2,100,1.5,4096,"), "bad_value"),
    "csv/year-1.csv": (_csv(f"c8,{MODEL},,1,100,1.5,4096,0001-01-01T00:00:00"), "bad_timestamp"),
    "csv/year-9999.csv": (_csv(f"c9,{MODEL},,1,100,1.5,4096,9999-12-31T23:59:59-05:00"), "bad_timestamp"),
    "csv/huge-field.csv": (_csv(f'c10,{MODEL},,1,100,1.5,4096,"{"x" * 200_000}"'), "malformed"),
    "csv/5000-digits.csv": (_csv(f"c11,{MODEL},,1,{'9' * 5000},1.5,4096,"), "out_of_range"),
    # Parquet: UInt64 beyond int64, Int64 beyond Int32, a datetime in year 1
    "parquet/uint64.parquet": (
        _parquet(
            {
                "deployment_id": pl.Series(["p1"]),
                "model": pl.Series([MODEL]),
                "num_gpu_blocks": pl.Series([2**64 - 1], dtype=pl.UInt64),
            }
        ),
        "out_of_range",
    ),
    "parquet/tp-int64.parquet": (
        _parquet(
            {"deployment_id": pl.Series(["p2"]), "model": pl.Series([MODEL]), "tp": pl.Series([2**40], dtype=pl.Int64)}
        ),
        "out_of_range",
    ),
    "parquet/inf.parquet": (
        _parquet(
            {
                "deployment_id": pl.Series(["p3"]),
                "model": pl.Series([MODEL]),
                "max_concurrency": pl.Series([float("inf")]),
            }
        ),
        "not_finite",
    ),
    "parquet/not-parquet.parquet": (b"PAR1 this is not parquet PAR1", "malformed"),
    # Prometheus: DCGM gpu labels beyond int32 / not ASCII digits; huge sample timestamps; cache_config_info
    "prom/gpu-label.prom": (
        PROM_HEAD + DCGM.format(gpu="99999999999999999999") + "\n" + DCGM.format(gpu="\u00b2") + "\n",
        None,
    ),
    "prom/huge-timestamp.prom": (f"{VLLM_RUNNING} 3 {'9' * 40}\n", "bad_timestamp"),
    "prom/timestamp-year-9999.prom": (f"{VLLM_RUNNING} 3 253402300799000\n", "bad_timestamp"),
    "prom/scraped-at-year-1.prom": (f"# scraped_at: 0001-01-01T00:00:00+05:00\n{VLLM_RUNNING} 3\n", "bad_timestamp"),
    "prom/blocks.prom": (
        PROM_HEAD + f'vllm:cache_config_info{{model_name="{MODEL}",num_gpu_blocks="1e30",block_size="16"}} 1\n',
        "out_of_range",
    ),
    "prom/blocks-int.prom": (
        PROM_HEAD + f'vllm:cache_config_info{{model_name="{MODEL}",num_gpu_blocks="{"9" * 30}"}} 1\n',
        "out_of_range",
    ),
    "prom/values.prom": (
        PROM_HEAD
        + f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} +Inf\n'
        + f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 1e300\n'
        + f'vllm:num_preemptions_total{{model_name="{MODEL}"}} NaN\n',
        "not_finite",
    ),
    "prom/arabic-value.prom": (PROM_HEAD + f"{VLLM_RUNNING} \u0663\n", "malformed"),
    # vLLM logs: pasted command lines and block counts beyond any column, huge sizes, years, long lines
    "logs/tp-command.log": (
        f"$ vllm serve {MODEL} --tensor-parallel-size 99999999999 --max-model-len 99999999999999999999\n" + LOG_KV,
        "out_of_range",
    ),
    "logs/gpu-blocks.log": (
        LOG_HEAD + "INFO 10-14 [x.py:1] # GPU blocks: 99999999999999999999, # CPU blocks: 1\n",
        "out_of_range",
    ),
    "logs/num-gpu-blocks.log": (LOG_HEAD + f"INFO 10-14 [x.py:1] num_gpu_blocks is: {'9' * 5000}\n", "out_of_range"),
    "logs/huge-size.log": (LOG_HEAD + "INFO [x.py:1] Model loading took 99999999999999999999999 GiB\n", "out_of_range"),
    "logs/arabic-size.log": (LOG_HEAD + "INFO [x.py:1] Model loading took \u0661\u0662.5 GiB\n" + LOG_KV, "malformed"),
    "logs/observed-year-1.log": ("# observed_at: 0001-01-01\n" + LOG_HEAD + LOG_KV, "bad_timestamp"),
    "logs/long-line.log": (
        LOG_HEAD + "INFO Available KV cache memory: " + "9" * 1_000_000 + "\n" + LOG_KV,
        "too_large",
    ),
    "logs/nested-args.log": (
        "INFO [api_server.py:1] non-default args: {'model': " + "[" * 100_000 + "\n" + LOG_KV,
        "too_large",
    ),
    "logs/nested-args-300.log": (
        "INFO [api_server.py:1] non-default args: {'model': " + "[" * 300 + "\n" + LOG_KV,
        "malformed",
    ),
    "logs/namespace.log": (
        f"INFO args: Namespace(model='{MODEL}', tensor_parallel_size=1e400)\n" + LOG_KV,
        "bad_value",
    ),
    "logs/binary.log": (os.urandom(4096).replace(b"\x00", b"\x01") + b"\xff\xfe\xfd", "encoding"),
    "logs/leaky.log": (LEAKY_LOG, "malformed"),
    # sidecars: deep JSON / YAML, aliases that explode, integers beyond int32, lone surrogates, year 1
    "deep-json/deployment.json": (_deep_json(100_000), "bad_sidecar"),
    "deep-json/startup.log": (LOG_HEAD + LOG_KV.replace("56.12", "56.13"), None),
    "deep-yaml/deployment.yaml": ("notes: " + "[" * 100_000 + "\n", "bad_sidecar"),
    "deep-block-yaml/deployment.yaml": ("".join("  " * i + "a:\n" for i in range(300)), "bad_sidecar"),
    "deep-dash-yaml/deployment.yaml": ("notes: " + "- " * 200_000 + "x\n", "bad_sidecar"),
    "laughs/deployment.yaml": (_laughs(9), "bad_sidecar"),
    "tp-sidecar/deployment.yaml": ("tp: 99999999999\n", "out_of_range"),
    "surrogate/deployment.json": (json.dumps({"deployment_id": "x\ud800y", "notes": "\udcff"}), None),
    "surrogate/startup.log": (LOG_HEAD + LOG_KV.replace("56.12", "56.14"), None),
    "year-sidecar/deployment.yaml": ("observed_at: 0001-01-01T00:00:00\n", "bad_timestamp"),
    "year-9999-sidecar/deployment.yaml": ("observed_at: 9999-12-31 23:59:59-05:00\n", "bad_timestamp"),
    "sidecar-list.yaml.meta.yaml": ("- 1\n- 2\n", "bad_sidecar"),
    "bad-tp-type/deployment.yaml": ("tp: [1, 2]\n", "bad_sidecar"),
}

# File names that are not UTF-8 (bytes), with their expected outcome.
RAW_NAMES: dict[bytes, tuple[bytes, str | None]] = {
    b"names/bad-\xff\xfe.log": ((LOG_HEAD + LOG_KV.replace("56.12", "56.15")).encode(), None),
    f"names/{TOKEN}.log".encode(): ((LOG_HEAD + LOG_KV.replace("56.12", "56.16")).encode(), None),  # shown redacted
}


def deep_folder(top: Path, depth: int, name: str = "a", files: Mapping[str, str] | None = None) -> Path:
    """`top/name/name/.../name`, `depth` levels (made relative to an open folder: no long paths, no
    chdir), with `files` (file name: text) written in the innermost; returns the innermost folder."""
    top.mkdir(parents=True)
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        for file, text in (files or {}).items():
            with open(os.open(file, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w", encoding="utf-8") as out:
                out.write(text)
    finally:
        os.close(fd)
    return top.joinpath(*[name] * depth)


def remove_deep_folder(top: Path, name: str = "a") -> None:
    """Remove what `deep_folder` made below `top`, innermost first (shutil.rmtree, and pytest's
    clean-up of old temporary folders, recurse once per level and would fail)."""
    fds = [os.open(top, os.O_RDONLY)]
    try:
        while name in os.listdir(fds[-1]):
            fds.append(os.open(name, os.O_RDONLY, dir_fd=fds[-1]))
        while len(fds) > 1:
            inner = fds.pop()
            for entry in os.listdir(inner):
                os.unlink(entry, dir_fd=inner)
            os.close(inner)
            os.rmdir(name, dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


def remove_deep_folders(root: Path) -> None:
    """Remove the deep folder `write_hostile_drop` made under `root/telemetry`."""
    top = root / "telemetry" / "deep-dirs"
    if not top.exists():
        return
    remove_deep_folder(top)
    shutil.rmtree(top)


def write_hostile_drop(root: Path) -> dict[str, str | None]:
    """Write the hostile folder under `root` (plus links, a FIFO, a sparse 300 MB file, odd
    mtimes, and the good SAMPLE deployment) and return {file: expected reason code or None}."""
    drop = root / "telemetry"
    expected: dict[str, str | None] = {}
    shutil.copytree(SAMPLE_DIR / GOOD, drop / GOOD)
    for path in sorted((drop / GOOD).iterdir()):
        expected[f"{GOOD}/{path.name}"] = None
    for name, (content, code) in CONTENT.items():
        path = drop / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8", errors="surrogatepass")
        expected[name] = code
    for raw_name, (content, code) in RAW_NAMES.items():
        path = Path(os.fsdecode(os.fsencode(drop) + b"/" + raw_name))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        expected[clean_text(raw_name.decode("utf-8", "backslashreplace")) or ""] = code
    deep = deep_folder(drop / "deep-dirs", 1200)  # deeper than Python's recursion limit
    (deep / "m.prom").write_text(PROM_HEAD + f"{VLLM_RUNNING} 6\n", encoding="utf-8")
    # the walk's depth limit (models_registry.walk.MAX_DEPTH): the first folder past it is one entry
    expected["deep-dirs/" + "/".join(["a"] * MAX_DEPTH)] = "too_large"
    outside = root / "outside"
    outside.mkdir()
    (outside / "secret.log").write_text(f"vllm serve {MODEL}\nHF_TOKEN={TOKEN}\n" + LOG_KV, encoding="utf-8")
    special = drop / "special"
    special.mkdir()
    links = {
        "passwd.log": "/etc/passwd",
        "zero.prom": "/dev/zero",
        "outside.log": str(outside / "secret.log"),
        "outside-dir": str(outside),
        "relative-out.log": "../../outside/secret.log",
        "inside.log": f"../{GOOD}/startup.log",  # inside: followed (same bytes: a duplicate)
        "broken.log": "does-not-exist.log",
    }
    for name, target in links.items():
        (special / name).symlink_to(target)
    codes = {"passwd.log": "outside_folder", "zero.prom": "outside_folder", "outside.log": "outside_folder"}
    codes |= {"outside-dir": "outside_folder", "relative-out.log": "outside_folder", "inside.log": "duplicate"}
    codes |= {"broken.log": "unreadable"}
    for name, code in codes.items():
        expected[f"special/{name}"] = code
    (special / "inside-dir").symlink_to(drop / "csv")
    expected["special/inside-dir"] = "not_a_file"
    os.mkfifo(special / "pipe.prom")
    expected["special/pipe.prom"] = "not_a_file"
    with (special / "huge.log").open("wb") as handle:  # sparse: no disk used, 300 MB by its size
        handle.truncate(300 << 20)
    expected["special/huge.log"] = "too_large"
    stamp = special / "mtime-year-1.prom"
    stamp.write_text(f"{VLLM_RUNNING} 4\n", encoding="utf-8")
    os.utime(stamp, (-62135596800, -62135596800))
    expected["special/mtime-year-1.prom"] = "bad_timestamp"
    future = special / "mtime-year-9999.prom"
    future.write_text(f"{VLLM_RUNNING} 5\n", encoding="utf-8")
    os.utime(future, (253402300799, 253402300799))
    expected["special/mtime-year-9999.prom"] = "bad_timestamp"
    return expected
