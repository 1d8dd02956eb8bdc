"""The warehouse's SQL files: one relation per file, `warehouse/<layer>/<table>.sql`.

A relation's name is the same everywhere (STYLE.md §2): the Dagster asset key `[layer, table]`,
the DuckDB relation `layer.table` and this file. Files are run statement by statement, each with
the named parameters (`$run_id`, `$run_date`...) it uses bound from a mapping — values are never
formatted into SQL. Identifiers (schema, table and column names, which DuckDB cannot bind) go
through `ident`, which quotes them. A raw table that keeps rows across runs says so in one line,
`append incoming to raw.<table> keyed by run_id|part_id`, which `read_sql` writes out (`keyed_append`);
a select list several relations share is one line, `@columns <set> [of <alias>],` (`@casts` in staging),
which it writes out from the column dictionaries (`column_set`; a set outside them, `TYPED_COLUMN_SETS`,
carries its own types).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import duckdb

from capacity.columns import (
    BY_NAME,
    DEPLOYMENT_COLUMNS,
    DEPLOYMENT_KEYS,
    MART_DEPLOYMENT_COLUMNS,
    MART_GRID_COLUMNS,
    OBSERVED_MEMORY_TERMS,
    SHARED_DESCRIPTIONS,
    comment,
)
from warehouse.diff_columns import DIFF_ROW_COLUMNS, GRID_DIFF_COMMENTS, RELEASE_DIFF_COMMENTS

WAREHOUSE_DIR = Path(__file__).resolve().parent
LAYERS = ("raw", "staging", "marts")
QUERIES_DIR = WAREHOUSE_DIR / "queries"


# The relations whose column comments come from the column dictionary (capacity.columns) rather than
# their SQL file: {column: comment}, applied by `build_relation` after the file runs (the current marts
# take them from these history views, `_dictionary_comments`). Every mart takes from the dictionary the
# columns the marts share (SHARED_DESCRIPTIONS) that its file leaves undocumented, so its file keeps only
# the comments specific to it.
DICTIONARY_COMMENTS: dict[tuple[str, str], dict[str, str]] = {
    ("marts", "capacity_grid_history"): {c.name: comment(c) for c in MART_GRID_COLUMNS},
    ("marts", "deployments_history"): {c.name: comment(c, deployments=True) for c in MART_DEPLOYMENT_COLUMNS},
    ("marts", "grid_diff"): GRID_DIFF_COMMENTS,
    ("marts", "release_diff"): RELEASE_DIFF_COMMENTS,
}


class WarehouseSqlError(RuntimeError):
    """A warehouse SQL file is missing, or one of its statements failed (names the file)."""


def sql_path(layer: str, table: str) -> Path:
    """The file that defines `layer.table`."""
    if layer not in LAYERS:
        raise WarehouseSqlError(f"unknown warehouse layer {layer!r}; expected one of {', '.join(LAYERS)}")
    return WAREHOUSE_DIR / layer / f"{table}.sql"


def read_sql(layer: str, table: str) -> str:
    """The SQL that defines `layer.table`: its file, with an `append incoming` line written out."""
    path = sql_path(layer, table)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WarehouseSqlError(f"no SQL file for {layer}.{table} ({path})") from None
    text = _APPEND.sub(lambda match: keyed_append(layer, table, *match.groups()), text)
    return _COLUMN_SET.sub(lambda match: column_set(f"warehouse/{layer}/{table}.sql", *match.groups()), text)


# The select lists the grid's relations share, in the column dictionaries' order: written once here, so
# that a column added to the dictionary reaches every relation that lists the set. A file names one in a
# line `@columns <set> [of <alias>],` (each column, qualified by the alias) or `@casts <set>,` (each column
# cast to its dictionary type, for staging); `read_sql` writes the set out, one column a line.
# Sets outside the column dictionary carry their own DuckDB types, for `@casts`: the settings and the memory
# terms a telemetry observation reports, which the deployment summary keeps (staging.telemetry_observations,
# staging.telemetry_deployments; telemetry/summary.py SETTINGS, MEASURED).
TYPED_COLUMN_SETS: dict[str, dict[str, str]] = {
    "observed_settings": {
        "tp": "integer",
        "pp": "integer",
        "engine": "varchar",
        "engine_version": "varchar",
        "engine_generation": "varchar",
        "gpu_memory_utilization": "double",
        "max_model_len": "bigint",
        "max_num_seqs": "bigint",
        "max_num_batched_tokens": "bigint",
        "weight_dtype": "varchar",
        "quantization": "varchar",
        "kv_cache_dtype": "varchar",
        "block_size": "integer",
        "enable_prefix_caching": "boolean",
        "enforce_eager": "boolean",
        "triton_kernels": "boolean",
        "disable_custom_all_reduce": "boolean",
        "gpu_peer_access": "boolean",
        "unmodelled_features": "varchar",
        "speculative_config": "varchar",
    },
    "observed_memory_terms": dict.fromkeys(("total_gpu_memory_bytes", *OBSERVED_MEMORY_TERMS), "bigint"),
    # the key the recommendation tables' rows start with (staging.feature_value, procurement_buckets,
    # recommended_placements): which workload, served by which model
    "workload_model": {"workload": "varchar", "model": "varchar"},
}
COLUMN_SETS: dict[str, tuple[str, ...]] = {
    "grid_row": ("run_id", "run_date", "deployment_id"),  # the grid tables' rows: the run, the deployment
    "deployment_keys": DEPLOYMENT_KEYS,  # model .. num_gpus
    "deployment_figures": tuple(name for name in DEPLOYMENT_COLUMNS if name not in DEPLOYMENT_KEYS),
    "diff_row": DIFF_ROW_COLUMNS,  # marts.grid_diff and marts.release_diff: keys, then each figure before/after
    # a GPU's price offer (staging.gpus), joined by gpu onto the marts that cost GPUs (procurement_plan,
    # recommended_placements) beside their usd_per_gpu_hour
    "gpu_price": ("price_basis", "price_provider", "price_region", "price_commitment", "price_source", "price_date"),
    **{name: tuple(types) for name, types in TYPED_COLUMN_SETS.items()},
}
_COLUMN_SET = re.compile(r"^( *)@(columns|casts) ([a-z_]+)(?: of ([a-z_]+))?(,?)$", re.MULTILINE)


def column_set(file: str, indent: str, form: str, name: str, alias: str | None, comma: str) -> str:
    """The lines a `@columns` / `@casts` line of `file` stands for (the last one ends as that line does)."""
    if name not in COLUMN_SETS:
        raise WarehouseSqlError(f"{file}: unknown column set {name!r}; expected one of {', '.join(COLUMN_SETS)}")
    prefix = f"{alias}." if alias else ""
    if form == "casts":
        types = TYPED_COLUMN_SETS.get(name) or {c: BY_NAME[c].type.duckdb.lower() for c in COLUMN_SETS[name]}
        items = [f"{prefix}{c}::{types[c]} as {c}" for c in COLUMN_SETS[name]]
    else:
        items = [f"{prefix}{c}" for c in COLUMN_SETS[name]]
    return ",\n".join(f"{indent}{item}" for item in items) + comma


# A raw table that keeps rows across runs is written the same way each time: created from `incoming`
# with its key column(s) in front, the rows of this key deleted, `incoming` inserted by name. Its file
# says so in one line, `append incoming to raw.<table> keyed by run_id|part_id [order by <columns>];`,
# and `read_sql` puts the three statements of `keyed_append` in its place.
_APPEND = re.compile(
    r"^append incoming to ([a-z_]+)\.([a-z_]+) keyed by (run_id|part_id)(?: order by ([a-z_, ]+))?;$", re.MULTILINE
)
_KEY_COLUMNS = {
    "run_id": "$run_id::varchar as run_id, $run_date::date as run_date",
    "part_id": "$part_id::bigint as part_id",
}


def keyed_append(layer: str, table: str, schema: str, name: str, key: str, order_by: str | None = None) -> str:
    """The statements that append `incoming` to `layer.table`, replacing the rows of the same `key`."""
    if (schema, name) != (layer, table):
        raise WarehouseSqlError(f"warehouse/{layer}/{table}.sql appends to {schema}.{name}, not to its own table")
    rows = f"select {_KEY_COLUMNS[key]}, * from incoming"
    order = f"\norder by {order_by}" if order_by else ""
    return (
        f"create table if not exists {layer}.{table} as\n{rows}\nwith no data;\n\n"
        f"delete from {layer}.{table} where {key} = ${key};\n\n"
        f"insert into {layer}.{table} by name\n{rows}{order};"
    )


def header_comment(sql: str) -> str:
    """The leading `--` comment block of a SQL file (its grain and columns), without the dashes."""
    lines = []
    for line in sql.splitlines():
        stripped = line.strip()
        if not stripped.startswith("--"):
            break
        lines.append(stripped[2:].strip())
    return "\n".join(lines).strip()


def execute_sql(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object] | None = None, *, name: str = "sql"
) -> None:
    """Run every statement of `sql`, binding the named parameters each statement uses."""
    values = dict(params or {})
    for statement in con.extract_statements(sql):
        wanted = statement.named_parameters
        missing = wanted - values.keys()
        if missing:
            raise WarehouseSqlError(f"{name}: no value for parameter(s) {', '.join(sorted(missing))}")
        try:
            if wanted:
                con.execute(statement.query, {key: values[key] for key in wanted})
            else:
                con.execute(statement.query)
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise WarehouseSqlError(f"{name}: {first}") from exc


_CREATES = re.compile(
    r"\bcreate\s+(?:or\s+replace\s+)?(table|view)\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)",
    re.IGNORECASE,
)


def relation_kind(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> str | None:
    """'table', 'view' or None."""
    row = con.execute(
        "select table_type from information_schema.tables "
        "where table_schema = $schema and table_name = $table and table_catalog = current_database()",
        {"schema": layer, "table": table},
    ).fetchone()
    return None if row is None else _RELATION_KINDS[row[0]]


_RELATION_KINDS = {"BASE TABLE": "table", "VIEW": "view"}  # information_schema.tables.table_type


def build_relation(
    con: duckdb.DuckDBPyConnection, layer: str, table: str, params: Mapping[str, object] | None = None
) -> None:
    """Create (or replace) `layer.table` by running its SQL file, then comment its columns from the
    column dictionaries (`_dictionary_comments`: a SQL file holds no `comment on column`).

    Safe to re-run on a snapshot written by another version: when the file now makes a view where
    a table was (or the other way round), the old object is dropped first.
    """
    sql = read_sql(layer, table)
    for kind, schema, name in _CREATES.findall(sql):
        existing = relation_kind(con, schema.lower(), name.lower())
        if existing is not None and existing != kind.lower():
            con.execute(f"drop {existing} {qualified(schema.lower(), name.lower())}")
    execute_sql(con, sql, params, name=f"warehouse/{layer}/{table}.sql")
    for column, text in _dictionary_comments(con, layer, table).items():
        con.execute(f"comment on column {qualified(layer, table)}.{ident(column)} is {sql_string(text)}")


def _dictionary_comments(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> dict[str, str]:
    """The column comments of `layer.table`, {column: text}: its DICTIONARY_COMMENTS and its own descriptions
    (`column_descriptions`); for a mart, each column still undocumented takes its `<table>_history`'s comment
    (a current mart that is its history view at the published run is documented once, there), else the
    description the marts share."""
    comments = {**DICTIONARY_COMMENTS.get((layer, table), {}), **column_descriptions(layer, table)}
    if layer != "marts":
        return comments
    history = {name: text for name, _dtype, text in columns(con, layer, f"{table}_history") if text}
    for column, _dtype, text in columns(con, layer, table):
        inherited = history.get(column, SHARED_DESCRIPTIONS.get(column))
        if text is None and inherited is not None:
            comments.setdefault(column, inherited)
    return comments


def column_descriptions(layer: str, table: str) -> dict[str, str]:
    """`layer.table`'s own column descriptions, {column: text}: the `columns` mapping of the YAML file beside its
    SQL file (`warehouse/<layer>/<table>.yaml`), or none. As a dbt model's YAML: the SQL says how a relation is
    computed, the YAML what each of its columns means (a column the marts share is described once, in
    capacity.columns.SHARED_DESCRIPTIONS)."""
    path = sql_path(layer, table).with_suffix(".yaml")
    if not path.exists():
        return {}
    import yaml  # here: `capplan sql`'s light path imports this module and documents nothing

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise WarehouseSqlError(f"{path.name}: not YAML ({type(exc).__name__})") from None
    described = loaded.get("columns") if isinstance(loaded, dict) else None
    pairs = list(described.items()) if isinstance(described, dict) else []
    if not pairs or not all(isinstance(name, str) and isinstance(text, str) for name, text in pairs):
        raise WarehouseSqlError(f"{path.name}: expected `columns:`, a mapping of column name to description")
    return {str(name): str(text) for name, text in pairs}


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def sql_string(text: str) -> str:
    """A SQL string literal. Only for `COMMENT ON`, which DuckDB cannot bind, and only for comment text
    of the project's own (the column dictionary, or comments read back from the warehouse's catalog)."""
    return "'" + text.replace("'", "''") + "'"


def qualified(layer: str, table: str) -> str:
    return f"{ident(layer)}.{ident(table)}"


def row_count(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> int:
    row = con.execute(f"select count(*) from {qualified(layer, table)}").fetchone()
    return int(row[0]) if row else 0


def columns(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> list[tuple[str, str, str | None]]:
    """(name, type, comment) of each column of `layer.table`, in order."""
    rows = con.execute(
        "select column_name, data_type, comment from duckdb_columns() "
        "where schema_name = $schema and table_name = $table and database_name = current_database() "
        "order by column_index",
        {"schema": layer, "table": table},
    ).fetchall()
    return [(str(name), str(dtype), comment) for name, dtype, comment in rows]


def example_queries() -> dict[str, str]:
    """`warehouse/queries/*.sql` by file stem, in name order."""
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(QUERIES_DIR.glob("*.sql"))}


INCOMING = "incoming"


def load_frame(
    con: duckdb.DuckDBPyConnection,
    layer: str,
    table: str,
    frame: object,
    params: Mapping[str, object] | None = None,
) -> int:
    """Write a Polars frame (or a Parquet file, given its Path) into `layer.table` through its SQL
    file, which reads the relation `incoming` (and may bind `params`). Returns the rows it had.

    A table that keeps rows across runs (its file appends rows keyed by `$run_id`, or by the
    content key `$part_id`) gains any column the frame brings that it does not have yet, so that
    code changes never drop history.
    """
    if isinstance(frame, Path):
        con.read_parquet(str(frame)).create_view(INCOMING, replace=True)
    else:
        con.register(INCOMING, frame)
    try:
        sql = read_sql(layer, table)
        key = "part_id" if "$part_id" in sql else "run_id" if "$run_id" in sql else None
        if key is not None and relation_kind(con, layer, table) == "table":
            present = {name for name, _type, _comment in columns(con, layer, table)}
            if key not in present:  # written by a version that kept one run: start its history
                con.execute(f"drop table {qualified(layer, table)}")
            else:
                for name, dtype, *_ in con.execute(f"describe select * from {INCOMING}").fetchall():
                    if name not in present:
                        con.execute(f"alter table {qualified(layer, table)} add column {ident(str(name))} {dtype}")
        build_relation(con, layer, table, params)
        counted = con.execute(f"select count(*) from {INCOMING}").fetchone()
    finally:
        if isinstance(frame, Path):
            con.execute(f"drop view if exists {INCOMING}")
        else:
            con.unregister(INCOMING)
    return int(counted[0]) if counted else 0


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction around many writes to a file: committed once (each autocommitted insert
    appends to the write-ahead log, and a large one checkpoints), rolled back on any error."""
    con.execute("begin transaction")
    try:
        yield
    except BaseException:
        con.execute("rollback")
        raise
    con.execute("commit")


def is_run_keyed(con: duckdb.DuckDBPyConnection, layer: str, table: str) -> bool:
    """A table that keeps several runs' rows, keyed by its `run_id` column."""
    return relation_kind(con, layer, table) == "table" and any(
        name == "run_id" for name, _t, _c in columns(con, layer, table)
    )


# --- readers -----------------------------------------------------------------------------------

# Settings of every reader connection (`capplan sql`, `report`, `export`, the nightly summary).
# DuckDB takes them all at connect time, before it attaches the file: with external access off
# it still opens the database it was asked to open (read-only), but nothing else — no COPY TO,
# ATTACH, EXPORT, read_csv/read_text/glob on local files or URLs, INSTALL/LOAD, persistent secrets.
# `temp_directory = ''` turns off spilling, so a large sort never creates `<file>.tmp/` next to the
# warehouse; `lock_configuration` comes last and makes every later SET / PRAGMA of a setting fail.
READER_CONFIG: dict[str, str | bool] = {
    "enable_external_access": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_persistent_secrets": False,
    "temp_directory": "",
    "lock_configuration": True,
}

# Table functions that change the session despite the locked configuration: log storage
# (`enable_logging(storage = 'file', ...)` cannot write the file, but it leaves the connection
# unusable and aborts the process at exit), profiling, and the two that run SQL built from
# strings (`query(...)`, `json_execute_serialized_sql(...)`) and so would hide the others; and
# `checkpoint()` (a no-op on a read-only file, refused like the CHECKPOINT statement).
_SESSION_FUNCTIONS = frozenset(
    {
        "enable_logging",
        "disable_logging",
        "truncate_duckdb_logs",
        "enable_profiling",
        "disable_profiling",
        "query",
        "json_execute_serialized_sql",
        "checkpoint",
        "force_checkpoint",
    }
)


class ReadOnlyViolation(WarehouseSqlError):
    """A statement a reader may not run (one line, names the statement kind or function)."""


def connect_reader(path: str | Path, *, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a published warehouse file that cannot reach anything else
    (`memory_limit`: DuckDB's, e.g. '2GB'; set before the configuration is locked)."""
    config: dict[str, str | bool | int | float | list[str]] = (
        {"memory_limit": memory_limit} if memory_limit else {}
    )
    config.update(READER_CONFIG)  # lock_configuration last
    return duckdb.connect(str(path), read_only=True, config=config)


def _allowed_statement_types() -> frozenset[duckdb.StatementType]:
    kinds = duckdb.StatementType
    names = ("SELECT", "EXPLAIN", "PREPARE", "EXECUTE", "SET", "VARIABLE_SET", "CALL")
    return frozenset(getattr(kinds, name) for name in names if hasattr(kinds, name))


def reader_statements(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
    """The statements of `sql` a reader may run, in order (ReadOnlyViolation otherwise).

    Defence in depth next to READER_CONFIG: only statements that read (SELECT, and what DuckDB
    rewrites to one: DESCRIBE, SHOW, SUMMARIZE and the reading PRAGMAs such as `pragma version`;
    EXPLAIN; PREPARE/EXECUTE; SET and CALL, which the locked configuration and the read-only file
    still bound), so a COPY, ATTACH, EXPORT, INSTALL, LOAD, CHECKPOINT, DDL statement or a PRAGMA
    that changes the session (`enable_checkpoint_on_shutdown`...) is refused by name before it
    reaches DuckDB.

    The splitting itself runs on a locked-down connection (`con`, a reader's, else an in-memory
    one with READER_CONFIG): DuckDB expands `IMPORT DATABASE '<dir>'` while it splits, reading
    `<dir>/schema.sql`, so an unrestricted splitter would read (and leak) files. Before that, the
    statements that name files or the session's extensions (IMPORT, EXPORT, ATTACH, COPY,
    INSTALL, LOAD...) are refused by their first word (`_refuse_file_statements`), so nothing is read.
    """
    allowed = _allowed_statement_types()
    _refuse_file_statements(sql)
    if con is None:
        with duckdb.connect(":memory:", config=dict(READER_CONFIG)) as locked:
            statements = locked.extract_statements(sql)
    else:
        statements = con.extract_statements(sql)
    out: list[str] = []
    for statement in statements:
        kind = statement.type
        text = statement.query
        if kind not in allowed:
            label = kind.name.replace("_", " ")
            raise ReadOnlyViolation(f"the warehouse is read-only here: {label} statements are not allowed")
        if kind == duckdb.StatementType.CALL and _CHECKPOINT.match(text):
            raise ReadOnlyViolation("the warehouse is read-only here: CHECKPOINT is not allowed")
        _refuse_session_functions(text)
        out.append(text)
    return out


# Statements refused by their first word (after EXPLAIN [ANALYZE], FORCE or `PREPARE name AS`, and
# leading parentheses), before DuckDB parses anything: each reads or writes files or extensions.
_FILE_STATEMENTS = frozenset(
    {"import", "export", "attach", "detach", "copy", "install", "load", "checkpoint", "vacuum", "update"}
)
_HEAD_WORDS = frozenset({"(", "explain", "analyze", "analyse", "force"})


def _refuse_file_statements(sql: str) -> None:
    """ReadOnlyViolation for a statement whose first word is in _FILE_STATEMENTS (tokens only:
    the tokenizer reads no file)."""
    tokens = duckdb.tokenize(sql)
    head: list[str] = []  # the words of the current statement so far
    for position, (offset, kind) in enumerate(tokens):
        end = tokens[position + 1][0] if position + 1 < len(tokens) else len(sql)
        raw = sql[offset:end].strip()
        if kind == duckdb.token_type.operator and raw.startswith(";"):
            head = []
            continue
        word = raw[:1] if kind == duckdb.token_type.operator else _token_word(raw)
        if kind == duckdb.token_type.keyword and word in _FILE_STATEMENTS and _at_head(head):
            raise ReadOnlyViolation(f"the warehouse is read-only here: {word.upper()} statements are not allowed")
        if word == "import_database" and kind in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            raise ReadOnlyViolation("the warehouse is read-only here: IMPORT statements are not allowed")  # PRAGMA form
        head.append(word if kind != duckdb.token_type.string_const else "'")


def _at_head(words: list[str]) -> bool:
    """Whether the next word starts the statement (`words`: the statement's words before it)."""
    if all(w in _HEAD_WORDS for w in words):
        return True
    rest = [w for w in words if w != "("]
    return len(rest) == 3 and rest[0] == "prepare" and rest[2] == "as"


_CHECKPOINT = re.compile(r"\s*(force\s+)?checkpoint\b", re.IGNORECASE)


def _refuse_session_functions(text: str) -> None:
    tokens = duckdb.tokenize(text)
    for position, (offset, kind) in enumerate(tokens):
        if kind not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        end = tokens[position + 1][0] if position + 1 < len(tokens) else len(text)
        word = _token_word(text[offset:end])
        called = position + 1 < len(tokens) and text[end : end + 1] == "("
        if word in _SESSION_FUNCTIONS and called:
            raise ReadOnlyViolation(f"the warehouse is read-only here: {word}() is not allowed")


def _token_word(raw: str) -> str:
    """An identifier token's name, lowercased, without its quotes or a comment that follows it."""
    if raw.startswith('"'):
        closing = raw.find('"', 1)
        return raw[1 : closing if closing > 0 else None].lower()
    match = re.match(r"[^\s\"/(.,;-]+", raw)
    return match.group(0).lower() if match else ""
