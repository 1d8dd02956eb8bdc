"""The column dictionary: every output column of the capacity grid, defined once.

Each `Column` gives a name, a type (`ColumnType`: its Polars and its DuckDB type), a unit where it
has one, its description (the comment the warehouse puts on the column), its grain and, where
`capplan estimate --json` reports it, its name in that contract. `COLUMNS` is in the published
order (`marts.capacity_grid_history`, run stamp first, prices last); what is generated from it:

- `GRID_COLUMNS`, `CONTEXT_COLUMNS`, `DEPLOYMENT_KEYS`, `DEPLOYMENT_COLUMNS` and `grid_schema()` (the
  grid's `{name: Polars dtype}`), which `capacity.grid` and `warehouse.capacity_grid` import;
- the column comments of the grid relations (`MART_GRID_COLUMNS`, `MART_DEPLOYMENT_COLUMNS`), which
  `warehouse.sql.build_relation` applies after running their SQL files;
- the `capplan estimate --json` keys (`CONTRACT`, in the contract's own order), which
  `Estimate.contract` (the scalar estimate) follows.

A new output column is one entry here plus its rule (and, in the warehouse, its line in the SQL
select lists, which `tests/test_columns.py` holds to this order). Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

    PolarsType = pl.DataType | type[pl.DataType]


class ColumnType(Enum):
    """A column's type in the grid's Polars frames and in DuckDB."""

    LABEL = "label"  # a repeated string: Categorical in Polars (joins on codes), VARCHAR
    TEXT = "text"  # a free string, mostly null: String, VARCHAR
    SIZE = "size"  # a small count (TP, PP, GPUs): Int64, INTEGER
    INT = "int"  # bytes, tokens, blocks, sequences: Int64, BIGINT
    FLOAT = "float"
    BOOL = "bool"
    DATE = "date"

    @property
    def polars(self) -> PolarsType:
        # imported here: warehouse.sql reads the comments on `capplan sql`'s light path, which loads no Polars
        import polars as pl

        dtype: PolarsType = getattr(pl, _POLARS[self])
        return dtype

    @property
    def duckdb(self) -> str:
        return _DUCKDB[self]


_POLARS = {  # names of the Polars dtypes
    ColumnType.LABEL: "Categorical",
    ColumnType.TEXT: "String",
    ColumnType.SIZE: "Int64",
    ColumnType.INT: "Int64",
    ColumnType.FLOAT: "Float64",
    ColumnType.BOOL: "Boolean",
    ColumnType.DATE: "Date",
}
_DUCKDB = {
    ColumnType.LABEL: "VARCHAR",
    ColumnType.TEXT: "VARCHAR",
    ColumnType.SIZE: "INTEGER",
    ColumnType.INT: "BIGINT",
    ColumnType.FLOAT: "DOUBLE",
    ColumnType.BOOL: "BOOLEAN",
    ColumnType.DATE: "DATE",
}


class Grain(Enum):
    """What a column's value depends on."""

    RUN = "run"  # the warehouse's stamp of the run that published the row
    KEY = "deployment key"  # names the deployment (model x GPU x engine x dtypes x TP x PP)
    DEPLOYMENT = "deployment"  # a property of the deployment, the same at every context
    CONTEXT = "context"  # depends on the context too


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: ColumnType
    grain: Grain
    description: str  # the column comment in the warehouse
    unit: str | None = None
    contract: str | None = None  # its key in `capplan estimate --json`, where it is one
    attribute: str | None = None  # the `Estimate` attribute behind that key, where not the key itself
    warehouse: bool = False  # added by the warehouse (run stamp, deployment id, prices), not by the grid
    # marts.deployments_history's comment where it differs from the grid's (max_model_len: two texts today)
    deployment_description: str | None = None


_T, _I, _S, _F = ColumnType.LABEL, ColumnType.INT, ColumnType.SIZE, ColumnType.FLOAT
_K, _D, _C = Grain.KEY, Grain.DEPLOYMENT, Grain.CONTEXT
_B = "bytes"

COLUMNS: tuple[Column, ...] = (
    Column(
        "run_id",
        ColumnType.TEXT,
        Grain.RUN,
        "The nightly run that published this row (marts.runs.run_id).",
        warehouse=True,
    ),
    Column("run_date", ColumnType.DATE, Grain.RUN, "UTC date the run started.", warehouse=True),
    Column(
        "deployment_id",
        _I,
        _D,
        "Key of the deployment within its run (marts.deployments.deployment_id; join "
        "history on run_id and deployment_id).",
        warehouse=True,
    ),
    Column("model", _T, _K, "Hugging Face repo id (marts.models.model).", contract="model"),
    Column("model_family", _T, _K, "Model family."),
    Column("gpu", _T, _K, "GPU catalog id (marts.gpus.gpu).", contract="gpu"),
    Column(
        "engine",
        _T,
        _K,
        "Engine profile whose accounting is reproduced: vllm, sglang, trtllm, plain.",
        contract="engine",
    ),
    Column(
        "engine_version",
        _T,
        _K,
        "Engine version the profile follows (vLLM rules change by release).",
        contract="engine_version",
    ),
    Column(
        "weight_dtype",
        _T,
        _K,
        "Requested weight dtype, as capplan estimate --dtype: bf16, auto (the "
        "checkpoint's own format), fp8, int4, mxfp4.",
    ),
    Column("kv_dtype", _T, _K, "Requested KV cache dtype, as --kv-dtype: auto (the model dtype) or fp8."),
    Column("tp", _S, _K, "Tensor-parallel size.", "GPUs", contract="tp"),
    Column("pp", _S, _K, "Pipeline-parallel size.", "GPUs", contract="pp"),
    Column(
        "dp",
        _S,
        _K,
        "Attention data-parallel ranks, a KV pool and a scheduler each (vLLM --data-parallel-size, SGLang "
        "--dp-size with --enable-dp-attention); 1: none. Pool, tokens and B_max are one rank's.",
        "ranks",
        contract="dp",
    ),
    Column(
        "ep",
        _S,
        _K,
        "Expert-parallel ranks the routed experts are split over whole (vLLM --enable-expert-parallel: tp * dp; "
        "SGLang --ep-size); 1: experts split by tensor parallel.",
        "ranks",
        contract="ep",
    ),
    Column("num_gpus", _S, _K, "GPUs per replica: tp * pp, times dp where each DP rank is a TP group (vLLM).", "GPUs"),
    Column(
        "context",
        _I,
        _C,
        "Tokens per sequence T (prompt included): powers of two from 1,024, plus the model limit.",
        "tokens",
        contract="context",
        attribute="context_tokens",
    ),
    # the contract's weight_dtype / kv_dtype are the resolved names: the grid's weight_format / kv_cache_dtype
    Column(
        "weight_format",
        _T,
        _D,
        "Weight format weight_dtype resolves to for this model (bf16, fp8, int4-awq, mxfp4...).",
        contract="weight_dtype",
    ),
    Column(
        "kv_cache_dtype",
        _T,
        _D,
        "KV cache dtype kv_dtype resolves to (bfloat16, float16, fp8...).",
        contract="kv_dtype",
    ),
    Column(
        "weights_source",
        _T,
        _D,
        "checkpoint (scaled from model.safetensors.index.json) or modeled (counted from the config).",
        contract="weights_source",
    ),
    Column(
        "not_modelled",
        ColumnType.TEXT,
        _D,
        "Why the engine's accounting of this model is not modelled (e.g. "
        "TensorRT-LLM per-window pools): the row's numbers are then capplan's approximation; NULL when "
        "modelled.",
        contract="not_modelled",
    ),
    Column(
        "gpu_memory_bytes",
        _I,
        _D,
        "Device memory the engine sees (bytes, as the driver reports it).",
        _B,
        contract="gpu_memory_bytes",
    ),
    Column(
        "gpu_memory_utilization",
        _F,
        _D,
        "Fraction of device memory the engine may use.",
        "fraction",
        contract="gpu_memory_utilization",
    ),
    Column(
        "max_model_len",
        _I,
        _D,
        "The max_model_len the deployment runs with: the model's context limit when "
        "the engine starts with it, else the largest length that starts (vLLM's auto-fit, --max-model-len -1); "
        "contexts above it do not fit.",
        "tokens",
        contract="max_model_len",
        deployment_description="Engine max model length the deployment is sized with.",
    ),
    Column(
        "max_num_seqs",
        _I,
        _D,
        "Engine cap on concurrent sequences (null when none).",
        "sequences",
        contract="max_num_seqs",
    ),
    Column(
        "kv_bytes_per_token",
        _I,
        _D,
        "KV bytes per token over every layer that stores per-token KV, whole "
        "model (sliding layers counted as inside the window).",
        _B,
        contract="kv_bytes_per_token",
    ),
    Column(
        "kv_bytes_per_token_per_gpu",
        _I,
        _D,
        "kv_bytes_per_token on the most loaded GPU under TP/PP (MLA latents replicated).",
        _B,
        contract="kv_bytes_per_token_per_gpu",
    ),
    Column(
        "state_bytes_per_sequence_per_gpu",
        _I,
        _D,
        "Constant per-sequence state of Mamba/linear-attention "
        "layers on the most loaded GPU (bytes; 0 for pure attention).",
        _B,
        contract="state_bytes_per_sequence_per_gpu",
    ),
    Column(
        "weights_bytes_per_gpu", _I, _D, "Weights on the most loaded GPU (bytes).", _B, contract="weights_bytes_per_gpu"
    ),
    Column(
        "activation_peak_bytes_per_gpu",
        _I,
        _D,
        "Peak activation memory of the engine's profiling pass (bytes).",
        _B,
        contract="activation_peak_bytes_per_gpu",
    ),
    Column(
        "non_torch_bytes_per_gpu",
        _I,
        _D,
        "CUDA context, NCCL and other non-torch memory (bytes).",
        _B,
        contract="non_torch_bytes_per_gpu",
    ),
    Column(
        "cuda_graph_bytes_per_gpu",
        _I,
        _D,
        "CUDA-graph memory deducted before sizing the KV cache (bytes; 0 where the release does not).",
        _B,
        contract="cuda_graph_bytes_per_gpu",
    ),
    Column(
        "overhead_bytes_per_gpu", _I, _D, "Sum of the overhead terms (bytes).", _B, contract="overhead_bytes_per_gpu"
    ),
    Column(
        "kv_budget_bytes_per_gpu",
        _I,
        _D,
        "Memory left for the KV cache per GPU: usable - weights - overhead (bytes; <= 0 means it does not fit).",
        _B,
        contract="kv_budget_bytes_per_gpu",
    ),
    Column(
        "num_blocks", _I, _D, "KV blocks in the pool: floor(budget / bytes per block).", "blocks", contract="num_blocks"
    ),
    Column("block_size", _I, _D, "Tokens per KV block (page) of the engine.", "tokens", contract="block_size"),
    Column(
        "kv_cache_tokens",
        _I,
        _D,
        "What the engine prints as the KV cache size in tokens (meaning per engine version; see README).",
        "tokens",
        contract="kv_cache_tokens",
    ),
    Column("physical_kv_token_slots", _I, _D, "num_blocks * block_size.", "tokens", contract="physical_kv_token_slots"),
    Column(
        "max_concurrency",
        _F,
        _C,
        "Maximum concurrency for context tokens per request, as vLLM prints it (fractional).",
        "sequences",
        contract="max_concurrency",
    ),
    Column(
        "b_max_memory",
        _I,
        _C,
        "Whole sequences of context tokens that fit in the KV pool at once (memory bound only).",
        "sequences",
        contract="b_max_memory",
    ),
    Column(
        "b_max",
        _I,
        _C,
        "Concurrent sequences of context tokens: b_max_memory capped by max_num_seqs.",
        "sequences",
        contract="b_max",
    ),
    Column(
        "fits",
        ColumnType.BOOL,
        _C,
        "True when the engine starts (its own start check at max_model_len) and "
        "at least one sequence of context tokens fits.",
        contract="fits",
    ),
    Column(
        "tpot_ms",
        _F,
        _C,
        "Predicted mean time per output token (ms) of a closed loop of b_max clients sending requests of context "
        "tokens (min(256, context / 2) generated, the rest prompt), as `vllm bench serve --max-concurrency b_max` "
        "measures it: the decode steps and the prefills of the prompts that join them (capacity.serving.closed_loop, "
        "held to the serving simulation; step costs fitted on public benchmarks); NULL where nothing fits or the GPU "
        "lacks bandwidth / TFLOPS data.",
        "ms",
    ),
    Column(
        "output_tokens_per_second",
        _F,
        _C,
        "Predicted output tokens/s of one replica in that closed loop (a generation of b_max requests: their decode "
        "steps and their prefills; a DP group's dp ranks each run their own loop of b_max: dp times one rank's).",
        "tokens/s",
    ),
    Column(
        "usd_per_hour",
        _F,
        _D,
        "On-demand USD per hour of one replica at today's price (also on past runs): "
        "num_gpus * marts.gpus.price_usd_per_gpu_hour.",
        "USD/h",
        warehouse=True,
    ),
    Column(
        "usd_per_million_output_tokens",
        _F,
        _C,
        "usd_per_hour over the replica's output tokens per hour at b_max, x 1e6: the best case of a full pool.",
        "USD",
        warehouse=True,
    ),
)
BY_NAME = {column.name: column for column in COLUMNS}

# --- what the grid computes (capacity.grid) ---------------------------------------------------------
_GRID = tuple(c for c in COLUMNS if not c.warehouse)
DEPLOYMENT_KEYS = tuple(c.name for c in _GRID if c.grain is Grain.KEY)
# Per-context columns; everything else in GRID_COLUMNS is a property of the deployment.
CONTEXT_COLUMNS = tuple(c.name for c in _GRID if c.grain is Grain.CONTEXT)
# The published grid: keys, context, then the breakdown of `capplan estimate --json` (contract names differ
# for weight_format / kv_cache_dtype, see `Column.contract`), then the per-context figures.
GRID_COLUMNS = (
    *DEPLOYMENT_KEYS,
    "context",
    *(c.name for c in _GRID if c.grain is Grain.DEPLOYMENT),
    *(name for name in CONTEXT_COLUMNS if name != "context"),
)
# What does not depend on the context (the warehouse's raw.deployments, after deployment_id).
DEPLOYMENT_COLUMNS = tuple(name for name in GRID_COLUMNS if name not in CONTEXT_COLUMNS)

# --- what the warehouse shows (warehouse.sql.build_relation documents these relations) ---------------
MART_GRID_COLUMNS = COLUMNS  # marts.capacity_grid_history and its macro marts.capacity_grid_at
MART_DEPLOYMENT_COLUMNS = tuple(c for c in COLUMNS if c.grain is not Grain.CONTEXT)  # marts.deployments_history


def comment(column: Column, *, deployments: bool = False) -> str:
    """The column's comment: in marts.deployments_history (`deployments`) or in the grid relations."""
    if deployments and column.deployment_description is not None:
        return column.deployment_description
    return column.description


# --- what many marts share (warehouse.sql.build_relation documents these in every mart) ----------------

# The description of a column that several marts carry with one meaning. A mart whose SQL file gives such
# a column no comment of its own gets this one; a file that means something narrower says so in its file.
_SHARED_GRID_COLUMNS = ("run_id", "run_date", "gpu", "model_family", "tp", "pp", "dp", "ep")
_PRICE_BASIS = (
    "What the price rests on: list (a provider's published offer), contract (your own catalog's price) or "
    "estimate (no public list price; bought only when the workloads file sets procurement.allow_estimated_prices)."
)
SHARED_DESCRIPTIONS: dict[str, str] = {
    **{name: BY_NAME[name].description for name in _SHARED_GRID_COLUMNS},
    "model": "Registry id of the model (marts.models.model).",  # the grid's: the Hugging Face repo id it plans
    "engine": "Serving engine.",  # the grid's `engine` (the profile reproduced) is documented by its own relations
    "file": "File, relative to the drop folder.",
    "price_source": "Where the price comes from (source text of the catalog or of your user catalog, "
    "CAPPLAN_USER_CATALOG).",
    "price_basis": _PRICE_BASIS,
    "price_provider": "Who sells at that price (aws, gcp, azure, lambda, coreweave, or your catalog's provider); "
    "null when the source names none.",
    "price_region": "Region of the offer, where the source states one.",
    "price_commitment": "Term of the offer: on-demand, spot, 1y or 3y.",
    "price_date": "When the price was read.",
    "calibration_scope": "The scope applied (marts.calibration.scope).",
    "peak_requests_running": "Most running requests observed.",
    "peak_requests_waiting": "Most waiting requests observed.",
    "preemptions_in_window": "Preemptions during the observed window (counter increase, resets counted).",
}


# The memory terms an engine's startup log reports per GPU before its KV cache, as telemetry names them:
# telemetry's checks and deployment summary read them, the telemetry staging views type them (warehouse.sql).
OBSERVED_MEMORY_TERMS = (
    "requested_memory_bytes",
    "other_process_bytes",
    "weights_bytes",
    "activation_peak_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
)


# --- what `capplan estimate --json` prints (Estimate.contract, the scalar estimate) ------------------


@dataclass(frozen=True, slots=True)
class ContractField:
    """A key of the `capplan estimate --json` object that is no grid column."""

    key: str
    description: str
    attribute: str | None = None  # the Estimate attribute; None: derived by Estimate.contract itself


CONTRACT_ONLY: tuple[ContractField, ...] = (
    ContractField("concurrency", "The target concurrency given (--concurrency), or null.", "target_concurrency"),
    ContractField(
        "max_context_at_concurrency",
        "The largest context at which the target concurrency fits.",
        "max_context_at_concurrency",
    ),
    ContractField("starts", "The engine starts with this max_model_len (its own start check).", "starts"),
    ContractField(
        "max_model_len_that_starts",
        "The largest max_model_len that starts (vLLM's auto-fit); 0: none.",
        "max_model_len_that_starts",
    ),
    ContractField(
        "max_in_flight_tokens", "Tokens in flight a windowed layer holds blocks for.", "max_in_flight_tokens"
    ),
    ContractField(
        "max_num_batched_tokens",
        "The engine's tokens per step (given, or the release's default): its profiling pass runs this many.",
        "max_num_batched_tokens",
    ),
    ContractField("modelled", "False when the engine's accounting of this model is not modelled (not_modelled)."),
    ContractField("reason", "Why it fits or not, in one line.", "reason"),
    ContractField("notes", "What the estimate assumed where an input was not given, and what it would move."),
    ContractField("activation_terms", "The activation peak's named terms ({term, bytes} per GPU)."),
    ContractField(
        "kv_tiers",
        "The GPU pool and the KV offload tiers behind it ({tier, medium, tokens, bytes, load_ms_per_1k_tokens, gpu_bytes} per GPU).",
    ),
    ContractField(
        "prefix_cache",
        "{cached_tokens, b_max_without}: the shared prefix held once (whole blocks) and B_max without sharing.",
    ),
    ContractField("dcp", "Decode context parallel: the GPUs one request's KV is split over (1: none)."),
    ContractField("attention_tp", "The ranks one attention layer and its KV are split over."),
    ContractField("b_max_dp_group", "Sequences the whole DP group holds at the context: dp x b_max."),
)

# What names a deployment's layout, in the order every answer lists it first (the contract, the fleet plan).
LAYOUT_KEYS = ("model", "gpu", "tp", "pp", "weight_dtype", "kv_dtype")
# The contract's keys in its own order (kept byte-identical: it predates the dictionary); each is a
# column's `contract` name or a CONTRACT_ONLY key (tests/test_columns.py checks both ways).
CONTRACT_KEYS = (
    *LAYOUT_KEYS,
    "engine",
    "engine_version",
    "gpu_memory_utilization",
    "max_model_len",
    "context",
    "concurrency",
    "gpu_memory_bytes",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "state_bytes_per_sequence_per_gpu",
    "weights_bytes_per_gpu",
    "weights_source",
    "activation_peak_bytes_per_gpu",
    "non_torch_bytes_per_gpu",
    "cuda_graph_bytes_per_gpu",
    "overhead_bytes_per_gpu",
    "kv_budget_bytes_per_gpu",
    "num_blocks",
    "block_size",
    "kv_cache_tokens",
    "physical_kv_token_slots",
    "max_concurrency",
    "b_max",
    "b_max_memory",
    "max_num_seqs",
    "max_context_at_concurrency",
    "fits",
    "starts",
    "max_model_len_that_starts",
    "max_in_flight_tokens",
    "max_num_batched_tokens",
    "modelled",
    "not_modelled",
    "reason",
    "notes",
    "activation_terms",
    "kv_tiers",
    "prefix_cache",
    "dp",
    "ep",
    "dcp",
    "attention_tp",
    "b_max_dp_group",
)
_CONTRACT_ATTRIBUTES: dict[str, str | None] = {
    **{c.contract: c.attribute or c.contract for c in COLUMNS if c.contract is not None},
    **{f.key: f.attribute for f in CONTRACT_ONLY},
}
# (key, Estimate attribute or None where Estimate.contract derives the value), in contract order
CONTRACT: tuple[tuple[str, str | None], ...] = tuple((key, _CONTRACT_ATTRIBUTES[key]) for key in CONTRACT_KEYS)


def grid_schema() -> dict[str, PolarsType]:
    """The grid's dtypes, declared once: `{name: Polars dtype}` of GRID_COLUMNS."""
    return {name: BY_NAME[name].type.polars for name in GRID_COLUMNS}


def grid_select() -> list[pl.Expr]:
    """GRID_COLUMNS cast to `grid_schema()`: the select at the grid's output, where its dtypes are declared."""
    import polars as pl

    return [pl.col(name).cast(dtype) for name, dtype in grid_schema().items()]
