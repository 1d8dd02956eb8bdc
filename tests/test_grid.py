"""The vectorized grid against the scalar engine: every column of sampled rows equals
`estimate(...).contract()`, the context limits equal `pool.max_context`, and the byte
arithmetic equals plain Python integers (stack-notes G4: Polars literals do not widen)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from capacity.estimate import AUTO_MAX_MODEL_LEN
from capacity.grid import (
    CONTEXT_COLUMNS,
    DEPLOYMENT_KEYS,
    GRID_COLUMNS,
    TABLE_CONTEXT_COLUMNS,
    TARGET_CONCURRENCIES,
    GridModel,
    GridOptions,
    GridTables,
    build_capacity_grid,
    build_context_limits,
    build_deployments,
    grid_contexts,
    grid_tables,
    grid_tables_sql,
    iter_grid_tables,
    weight_dtype_choices,
    with_python_round,
)
from capacity.kv.kinds import FullAttention, RecurrentState
from capacity.performance import efficiency_for, perf_inputs
from capacity.serving.closed_loop import closed_loop_speed, grid_lengths, wave_share
from capacity.spec import CheckpointQuant, DeploymentSpec, GpuSku, KVKind, LayerKVSpec, LayerParams, ModelSpec
from tests.estimating import estimate_model
from tests.handmade import dense_spec, mla_spec
from warehouse.capacity_grid import row_deployment

GIB = 1 << 30
CATALOG = Path(__file__).resolve().parent.parent / "models_registry" / "catalog"

# Columns of the contract the grid carries under another name (the contract's are the resolved dtypes).
RENAMED = {"weight_format": "weight_dtype", "kv_cache_dtype": "kv_dtype"}
BYTE_COLUMNS = [c for c in GRID_COLUMNS if c.endswith("_bytes") or "_bytes_" in c]


# --- hand-built models and GPUs -------------------------------------------------------------------


def _fields(spec: ModelSpec) -> dict[str, object]:
    return {name: getattr(spec, name) for name in spec.__dataclass_fields__}


def moe_spec() -> ModelSpec:
    """Mixtral-shaped: 8 experts, 2 per token, routed experts and a router per layer."""
    base = dense_spec(layers=32, heads=32, kv_heads=8, hidden=4096, intermediate=14336, context=32768)
    params = tuple(
        LayerParams(attention=p.attention, experts=8 * 3 * 4096 * 14336, router=8 * 4096, norms=p.norms)
        for p in base.layer_params
    )
    return replace(base, layer_params=params, num_experts=8, num_experts_per_token=2, family="mixtral")


def hybrid_mamba_spec() -> ModelSpec:
    """Jamba-shaped: one attention layer in eight, Mamba state elsewhere (conv + fp32 recurrent)."""
    base = dense_spec(layers=32, heads=32, kv_heads=8, hidden=4096, context=262144)
    layers = tuple(
        LayerKVSpec(i, FullAttention(8, 128, 128))
        if i % 8 == 4
        else LayerKVSpec(i, RecurrentState(conv_state_elements=3 * 8192, recurrent_state_elements=8192 * 16))
        for i in range(32)
    )
    return replace(base, layers=layers, family="jamba")


def gdn_spec() -> ModelSpec:
    """Qwen3-Next-shaped: gated-delta-net state in three layers of four, MoE."""
    base = moe_spec()
    layers = tuple(
        LayerKVSpec(i, FullAttention(2, 256, 256))
        if i % 4 == 3
        else LayerKVSpec(i, RecurrentState(conv_state_elements=4 * 8192, recurrent_state_elements=16 * 128 * 128))
        for i in range(32)
    )
    return replace(base, layers=layers, family="qwen3_next", context_limit_tokens=262144)


def models() -> list[GridModel]:
    gemma2 = [(KVKind.SLIDING, 4096), (KVKind.FULL, None)] * 21
    gemma3 = ([(KVKind.SLIDING, 1024)] * 5 + [(KVKind.FULL, None)]) * 8
    llama4 = ([(KVKind.CHUNKED, 8192)] * 3 + [(KVKind.FULL, None)]) * 12
    awq = replace(
        dense_spec(layers=80, heads=64, kv_heads=8, hidden=8192, intermediate=28672, vocab=128256, dtype="float16"),
        quantization=CheckpointQuant("awq", "int4", 128),
    )
    fp8 = replace(
        dense_spec(layers=32, heads=32, kv_heads=8, intermediate=14336, vocab=128256, context=131072),
        quantization=CheckpointQuant("fp8", "fp8"),
    )
    experts_only = CheckpointQuant("mxfp4", "mxfp4", attention_quantized=False, mlp_quantized=False)
    mxfp4 = replace(moe_spec(), quantization=experts_only, family="gpt_oss")
    return [
        GridModel("hand/llama-8b", dense_spec(layers=32, kv_heads=8, intermediate=14336, vocab=128256, context=131072),
                  16_060_522_496 + 12_345),
        GridModel("hand/mistral-7b-sliding", dense_spec(kv_heads=8, intermediate=14336, kinds=[(KVKind.SLIDING, 4096)] * 32)),
        GridModel("hand/gemma2", dense_spec(layers=42, heads=16, kv_heads=8, head_dim=256, hidden=3584, intermediate=14336,
                                            vocab=256000, context=8192, kinds=gemma2, tied=True)),
        GridModel("hand/gemma3", dense_spec(layers=48, heads=16, kv_heads=8, head_dim=256, hidden=3840, intermediate=15360,
                                            vocab=262144, context=131072, kinds=gemma3, tied=True)),
        GridModel("hand/llama4-chunked", replace(dense_spec(layers=48, heads=40, kv_heads=8, hidden=5120, context=1048576,
                                                            kinds=llama4), family="llama4")),
        GridModel("hand/deepseek-mla", mla_spec()),
        GridModel("hand/mla-small", mla_spec(layers=27, heads=16)),
        GridModel("hand/mixtral", moe_spec()),
        GridModel("hand/jamba", hybrid_mamba_spec()),
        GridModel("hand/qwen3-next", gdn_spec()),
        GridModel("hand/llama-70b-awq", awq, 39_772_896_256),
        GridModel("hand/llama-8b-fp8", fp8),
        GridModel("hand/gpt-oss-like", mxfp4),
        GridModel("hand/fp32-checkpoint", dense_spec(layers=24, heads=16, kv_heads=16, hidden=2048, intermediate=5632,
                                                     context=4096, dtype="float32")),
    ]  # fmt: skip


def gpus() -> list[GpuSku]:
    return [
        GpuSku("h100-sxm-80gb", "H100", "nvidia", 85_520_809_984, fp8_support=True, architecture="hopper"),
        GpuSku("a100-sxm-80gb", "A100", "nvidia", 84_987_740_160, architecture="ampere"),
        GpuSku("b200-180gb", "B200", "nvidia", 191_503_138_816, fp8_support=True, fp4_support=True,
               architecture="blackwell"),
        GpuSku("l4-24gb", "L4", "nvidia", 23_580_639_232, fp8_support=True, architecture="ada"),
        GpuSku("t4-16gb", "T4", "nvidia", 15_569_256_448, gpus_per_node=4, architecture="turing"),
        GpuSku("mi300x-192gb", "MI300X", "amd", 205_822_885_888, fp8_support=True, architecture="cdna3"),
    ]  # fmt: skip


def _estimate_row(row: dict[str, object], model: GridModel, gpu: GpuSku, concurrency: int | None = None):  # type: ignore[no-untyped-def]
    # the grid runs each deployment at the length that starts, at the release the row states (every engine's is
    # named: GridOptions.engine_version), as `capplan` re-estimates a grid row (warehouse estimate_for_row)
    version = row.get("engine_version")
    deployment = row_deployment(row, AUTO_MAX_MODEL_LEN, str(version) if version is not None else None)
    context = int(row["context"]) if "context" in row else None  # type: ignore[call-overload]
    return estimate_model(model, deployment, gpu=gpu, context_tokens=context, concurrency=concurrency)


def _assert_rows_match(
    grid: pl.DataFrame, sample: list[int], by_model: dict[str, GridModel], by_gpu: dict[str, GpuSku]
) -> None:
    compared = [c for c in GRID_COLUMNS if c not in ("model_family", "num_gpus", *SPEED_COLUMNS)]
    for i in sample:
        row = grid.row(i, named=True)
        est = _estimate_row(row, by_model[row["model"]], by_gpu[row["gpu"]])
        _assert_speed_matches(row, est, by_model[row["model"]], by_gpu[row["gpu"]])
        contract = est.contract()
        expected = {c: contract[RENAMED.get(c, c)] for c in compared if c not in ("weight_dtype", "kv_dtype")}
        got = {c: row[c] for c in expected}
        assert got == expected, {c: (got[c], expected[c]) for c in expected if got[c] != expected[c]} | {
            "row": {k: row[k] for k in (*DEPLOYMENT_KEYS, "context")}
        }
        # vLLM's world size is tp x pp x dp (every DP rank a TP group); SGLang's DP attention splits --tp
        assert row["num_gpus"] == row["tp"] * row["pp"] * (row["dp"] if row["engine"] == "vllm" else 1)


SPEED_COLUMNS = ("tpot_ms", "output_tokens_per_second")


def _assert_speed_matches(row: dict[str, object], est, model: GridModel, gpu: GpuSku) -> None:  # type: ignore[no-untyped-def]
    """The grid's speed columns are `closed_loop_speed` of a closed loop of B_max requests of the grid's lengths at
    T (what tests/test_closed_loop.py holds to the simulation), called here on Python numbers, or null where
    nothing fits or the GPU has no bandwidth / FLOPS data."""
    if est.b_max < 1 or gpu.memory_bandwidth_gbps is None or gpu.bf16_dense_tflops is None:
        assert row["tpot_ms"] is None and row["output_tokens_per_second"] is None, row
        return
    inputs = perf_inputs(model.spec, est, gpu, str(row["weight_dtype"]))
    input_tokens, output_tokens = grid_lengths(int(row["context"]))  # type: ignore[call-overload]
    chunk = est.pool.max_num_batched_tokens or input_tokens
    closed = closed_loop_speed(
        inputs, est.b_max, input_tokens, output_tokens, chunk, efficiency_for(est.engine, gpu), wave_share(est.engine)
    )
    assert row["tpot_ms"] == pytest.approx(closed.tpot_s * 1e3, rel=1e-9)
    # one replica's: every DP rank runs its own closed loop of b_max requests
    assert row["output_tokens_per_second"] == pytest.approx(est.dp * closed.output_tokens_per_s, rel=1e-9)


def _stratified(grid: pl.DataFrame, per_group: int, seed: int) -> list[int]:
    """Row indices: up to `per_group` from every (model, engine, pp > 1, dp > 1) group, chosen at random."""
    rng = random.Random(seed)
    groups = (
        grid.with_row_index("_i")
        .group_by("model", "engine", pl.col("pp") > 1, pl.col("dp") > 1)
        .agg(pl.col("_i"))
        .sort("model", "engine", "pp", "dp")
    )
    picked: list[int] = []
    for indices in groups.get_column("_i").to_list():
        picked += rng.sample(indices, min(per_group, len(indices)))
    return picked


@pytest.fixture(scope="module")
def hand_grid() -> pl.DataFrame:
    return build_capacity_grid(models(), gpus()).collect()


# --- the grid equals the scalar engine ------------------------------------------------------------


def test_hand_grid_matches_estimate_on_every_column(hand_grid: pl.DataFrame) -> None:
    by_model = {m.repo_id: m for m in models()}
    by_gpu = {g.id: g for g in gpus()}
    _assert_rows_match(hand_grid, _stratified(hand_grid, 12, seed=1), by_model, by_gpu)


def test_hand_grid_covers_families_engines_and_parallelism(hand_grid: pl.DataFrame) -> None:
    assert set(hand_grid.get_column("model").unique()) == {m.repo_id for m in models()}
    assert set(hand_grid.get_column("engine").unique()) == {"vllm", "sglang", "trtllm"}
    assert hand_grid.filter(pl.col("tp") > 1).height > 0
    pp = hand_grid.filter(pl.col("pp") > 1)
    assert pp.height > 0 and set(pp.get_column("pp").unique()) == {2, 4}
    # SGLang's window pool, vLLM's hybrid groups and MLA block sizes all occur
    assert hand_grid.filter(pl.col("pool_swa_window") > 0).height > 0
    assert set(hand_grid.filter(pl.col("model") == "hand/deepseek-mla", pl.col("engine") == "vllm")
               .get_column("block_size").unique()) == {16, 32, 64}  # fmt: skip
    # (vLLM 0.33 MLA backends: FLASH_ATTN_MLA 16 on Hopper, FLASHMLA 64 there with fp8 KV, FLASHINFER_MLA 32
    # on Blackwell, TRITON_MLA 16 elsewhere)
    assert hand_grid.filter(pl.col("fits")).height > 0 and hand_grid.filter(~pl.col("fits")).height > 0


def test_grid_types_and_column_order(hand_grid: pl.DataFrame) -> None:
    assert tuple(hand_grid.columns[: len(GRID_COLUMNS)]) == GRID_COLUMNS
    for column in BYTE_COLUMNS:
        assert hand_grid.schema[column] == pl.Int64, column
    for column in ("num_blocks", "kv_cache_tokens", "physical_kv_token_slots", "b_max", "context", "max_model_len"):
        assert hand_grid.schema[column] == pl.Int64, column
    assert hand_grid.schema["max_concurrency"] == pl.Float64
    assert hand_grid.schema["fits"] == pl.Boolean


def test_one_row_per_deployment_and_context(hand_grid: pl.DataFrame) -> None:
    keys = [*DEPLOYMENT_KEYS, "context"]
    assert hand_grid.select(keys).is_duplicated().sum() == 0


def test_rows_are_the_rules_of_the_module_docstring(hand_grid: pl.DataFrame) -> None:
    by_gpu = {g.id: g for g in gpus()}
    fp8 = hand_grid.filter((pl.col("weight_dtype") == "fp8") | (pl.col("kv_dtype") == "fp8"))
    assert all(by_gpu[g].fp8_support for g in fp8.get_column("gpu").unique())
    mx = hand_grid.filter(pl.col("weight_dtype") == "mxfp4")
    assert set(mx.get_column("gpu").unique()) == {"b200-180gb"}
    assert set(mx.get_column("model").unique()) == {"hand/mixtral", "hand/qwen3-next"}
    # PP > 1 only at the node's TP, where PP = 1 at that TP (TP only) holds no sequence of the smallest context
    pp1 = hand_grid.filter(pl.col("pp") == 1, pl.col("dp") == 1)
    for row in hand_grid.filter(pl.col("pp") > 1).select(DEPLOYMENT_KEYS).unique().iter_rows(named=True):
        node = pp1.filter(
            pl.col("model") == row["model"], pl.col("gpu") == row["gpu"], pl.col("engine") == row["engine"],
            pl.col("weight_dtype") == row["weight_dtype"], pl.col("kv_dtype") == row["kv_dtype"],
        )  # fmt: skip
        assert row["tp"] == node.get_column("tp").max()
        smallest = node.filter(pl.col("tp") == row["tp"], pl.col("context") == pl.col("context").min())
        assert smallest.height == 1 and smallest.get_column("b_max_memory")[0] == 0
    # a model that fits one node never gets PP rows
    assert (
        hand_grid.filter(pl.col("model") == "hand/llama-8b", pl.col("gpu") == "h100-sxm-80gb", pl.col("pp") > 1).height
        == 0
    )


def test_dp_ep_rows_are_the_layouts_moe_models_are_served_with(hand_grid: pl.DataFrame) -> None:
    """DP x EP rows only for MoE models, only at PP = 1, one node each with the experts split whole over it:
    vLLM `-tp T -dp node/T --enable-expert-parallel` (EP = T x dp = the node) for T below the node, SGLang
    `--tp node --enable-dp-attention --dp-size D --ep-size node` for D in 2, 4, 8 dividing the node; every other
    row keeps dp = ep = 1 and its meaning."""
    dp_rows = hand_grid.filter(pl.col("dp") > 1)
    assert set(dp_rows.get_column("model").unique()) == {"hand/mixtral", "hand/gpt-oss-like", "hand/qwen3-next"}
    assert set(dp_rows.get_column("engine").unique()) == {"vllm", "sglang"} and set(dp_rows["pp"].unique()) == {1}
    assert hand_grid.filter(pl.col("dp") == 1, pl.col("ep") > 1).height == 0
    mixtral = dp_rows.filter(pl.col("model") == "hand/mixtral").select("gpu", "engine", "tp", "dp", "ep", "num_gpus")
    layouts = {
        gpu: set(mixtral.filter(pl.col("gpu") == gpu).drop("gpu").unique().iter_rows())
        for gpu in ("h100-sxm-80gb", "t4-16gb")
    }
    vllm_node8 = {("vllm", 1, 8, 8, 8), ("vllm", 2, 4, 8, 8), ("vllm", 4, 2, 8, 8)}
    assert layouts["h100-sxm-80gb"] == vllm_node8 | {("sglang", 8, dp, 8, 8) for dp in (2, 4, 8)}
    vllm_node4 = {("vllm", 1, 4, 4, 4), ("vllm", 2, 2, 4, 4)}
    assert layouts["t4-16gb"] == vllm_node4 | {("sglang", 4, dp, 4, 4) for dp in (2, 4)}


def test_contexts_are_powers_of_two_and_the_limit() -> None:
    assert grid_contexts(131072) == [1024 * 2**i for i in range(8)]
    assert grid_contexts(40960) == [1024, 2048, 4096, 8192, 16384, 32768, 40960]
    assert grid_contexts(512) == [512]


def test_weight_dtype_choices() -> None:
    by_id = {m.repo_id: m.spec for m in models()}
    assert [d for d, *_ in weight_dtype_choices(by_id["hand/llama-8b"], GridOptions().weight_dtypes)] == [
        "bf16",
        "fp8",
        "int4",
    ]
    assert [d for d, *_ in weight_dtype_choices(by_id["hand/llama-70b-awq"], GridOptions().weight_dtypes)] == [
        "bf16",
        "auto",
        "fp8",
    ]
    assert [d for d, *_ in weight_dtype_choices(by_id["hand/gpt-oss-like"], GridOptions().weight_dtypes)] == [
        "bf16",
        "auto",
        "fp8",
        "int4",
    ]
    assert ("mxfp4", False, True) in weight_dtype_choices(by_id["hand/mixtral"], GridOptions().weight_dtypes)


def test_context_limits_equal_memory_max_context(hand_grid: pl.DataFrame) -> None:
    limits = build_context_limits(hand_grid.lazy()).collect()
    deployments = hand_grid.select(DEPLOYMENT_KEYS).unique().height
    assert limits.height == deployments * 5
    assert set(limits.get_column("concurrency").unique()) == {1, 8, 32, 128, 512}
    by_model = {m.repo_id: m for m in models()}
    by_gpu = {g.id: g for g in gpus()}
    for i in _stratified(limits, 6, seed=2):
        row = limits.row(i, named=True)
        expected = _estimate_row(row, by_model[row["model"]], by_gpu[row["gpu"]], row["concurrency"])
        assert row["max_context"] == expected.max_context_at_concurrency, row
    # the deployment frame gives the same table as the grid
    same = build_context_limits(build_deployments(models(), gpus())).collect()
    keys = [*DEPLOYMENT_KEYS, "concurrency"]
    assert same.sort(keys).equals(limits.sort(keys))


def test_other_vllm_release_and_options() -> None:
    options = GridOptions(engines=("vllm",), vllm_version="0.9", weight_dtypes=("bf16",), kv_dtypes=("auto",))
    grid = build_capacity_grid(models()[:4], gpus()[:2], options).collect()
    assert set(grid.get_column("engine_version").unique()) == {"0.9"}
    by_model = {m.repo_id: m for m in models()}
    by_gpu = {g.id: g for g in gpus()}
    for i in random.Random(3).sample(range(grid.height), 40):
        row = grid.row(i, named=True)
        deployment = DeploymentSpec(
            tp=row["tp"],
            pp=row["pp"],
            dp=row["dp"],
            ep=row["ep"],
            engine="vllm",
            engine_version="0.9",
            max_model_len=AUTO_MAX_MODEL_LEN,
        )
        model, gpu = by_model[row["model"]], by_gpu[row["gpu"]]
        contract = estimate_model(model, deployment, gpu=gpu, context_tokens=row["context"]).contract()
        for column in (
            "num_blocks",
            "kv_cache_tokens",
            "block_size",
            "b_max",
            "max_concurrency",
            "overhead_bytes_per_gpu",
        ):
            assert row[column] == contract[column], (column, row)


def test_empty_inputs_give_empty_frames_with_the_schema() -> None:
    grid = build_capacity_grid([], gpus()).collect()
    assert grid.height == 0 and tuple(grid.columns[: len(GRID_COLUMNS)]) == GRID_COLUMNS
    assert build_context_limits(grid.lazy()).collect().height == 0
    assert build_capacity_grid(models()[:1], []).collect().height == 0


# --- the real catalog configs ------------------------------------------------------------------------


def _catalog_models() -> list[GridModel]:
    from capacity.hf_config import parse_config
    from models_registry.sources.bundled import read_catalog_entries
    from models_registry.sources.common import checkpoint_bytes_from_index

    entries, _errors = read_catalog_entries(CATALOG)
    out = []
    for entry in entries:
        try:
            spec = parse_config(json.loads(entry.config_path.read_text()), name=entry.repo_id)
        except NotImplementedError:
            pytest.skip("capacity.hf_config.parse_config is not implemented yet")
        except ValueError:
            continue  # the parser refuses it with a reason; the registry reports those
        checkpoint = checkpoint_bytes_from_index(entry.index_path) if entry.index_path else None
        out.append(GridModel(entry.repo_id, spec, checkpoint))
    return out


def test_catalog_grid_matches_estimate() -> None:
    from models_registry.sources.gpu_catalog import load_gpu_skus

    catalog = _catalog_models()
    assert len(catalog) >= 40
    wanted = {"h100-sxm-80gb", "a100-sxm-80gb", "b200-180gb", "l4-24gb", "mi300x-192gb", "h200-sxm-141gb", "t4-16gb"}
    skus = [g for g in load_gpu_skus(CATALOG / "gpus.yaml") if g.id in wanted]
    grid = build_capacity_grid(catalog, skus).collect()
    assert set(grid.get_column("model").unique()) == {m.repo_id for m in catalog}
    families = set(grid.get_column("model_family").unique())
    assert {
        "llama",
        "mistral",
        "gemma2",
        "gemma3",
        "deepseek_v3",
        "gpt_oss",
        "jamba",
        "qwen3_next",
        "llama4",
    } <= families
    _assert_rows_match(grid, _stratified(grid, 2, seed=4), {m.repo_id: m for m in catalog}, {g.id: g for g in skus})
    limits = build_context_limits(grid.lazy()).collect()
    for i in random.Random(5).sample(range(limits.height), 150):
        row = limits.row(i, named=True)
        model = next(m for m in catalog if m.repo_id == row["model"])
        gpu = next(g for g in skus if g.id == row["gpu"])
        assert row["max_context"] == _estimate_row(row, model, gpu, row["concurrency"]).max_context_at_concurrency


def test_large_moe_dp_rows_equal_estimate_per_rank() -> None:
    """The layouts DeepSeek-V3 / R1 and Qwen3-235B-A22B are served with on an 8 x H200 node are grid rows, and
    every one of them (all contexts) is `estimate` of the same `--tp --dp --ep`; DeepSeek's MLA latent is whole on
    every rank: (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 bytes x 61 layers = 70,272 bytes per token and GPU
    (its config.json), at vLLM -tp 1 -dp 8 and SGLang --tp 8 --dp-size 8 alike."""
    from models_registry.sources.gpu_catalog import load_gpu_skus

    wanted = {"deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "Qwen/Qwen3-235B-A22B"}
    catalog = [m for m in _catalog_models() if m.repo_id in wanted]
    assert {m.repo_id for m in catalog} == wanted
    skus = [g for g in load_gpu_skus(CATALOG / "gpus.yaml") if g.id == "h200-sxm-141gb"]
    options = GridOptions(weight_dtypes=("bf16", "auto"), kv_dtypes=("auto",))
    grid = build_capacity_grid(catalog, skus, options).collect().filter(pl.col("dp") > 1)
    assert set(grid.get_column("model").unique()) == wanted
    by_model, by_gpu = {m.repo_id: m for m in catalog}, {g.id: g for g in skus}
    _assert_rows_match(grid, list(range(grid.height)), by_model, by_gpu)
    deepseek = grid.filter(pl.col("model") == "deepseek-ai/DeepSeek-V3", pl.col("dp") == 8)
    assert set(deepseek.select("engine", "tp").unique().iter_rows()) == {("vllm", 1), ("sglang", 8)}
    assert set(deepseek.get_column("kv_bytes_per_token_per_gpu").unique()) == {(512 + 64) * 2 * 61}


# --- byte arithmetic against plain Python integers (G4) -------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layers=st.integers(1, 160),
    heads_pow=st.integers(0, 7),
    kv_div=st.integers(0, 7),
    head_dim=st.sampled_from([64, 96, 128, 192, 256]),
    hidden=st.integers(256, 24576),
    intermediate=st.integers(256, 65536),
    vocab=st.integers(1000, 300_000),
    context=st.integers(1000, 1 << 22),
    seed=st.integers(0, 1 << 16),
    memory_gib=st.integers(8, 4096),
    checkpoint=st.one_of(st.none(), st.integers(1, 1 << 42)),
    sliding=st.one_of(st.none(), st.integers(2, 1 << 16)),
)
@example(  # PP 2 on a small GPU: the first stage's own budget binds (found by this test)
    layers=62, heads_pow=0, kv_div=0, head_dim=64, hidden=988, intermediate=16626, vocab=4455, context=1000, seed=0,
    memory_gib=8, checkpoint=None, sliding=None,
)
def test_byte_arithmetic_equals_python_integers(
    layers: int, heads_pow: int, kv_div: int, head_dim: int, hidden: int, intermediate: int, vocab: int,
    context: int, seed: int, memory_gib: int, checkpoint: int | None, sliding: int | None,
) -> None:  # fmt: skip
    heads = 1 << heads_pow
    kv_heads = max(1, heads >> kv_div)
    kinds = [(KVKind.SLIDING, sliding) if sliding and i % 2 == 0 else (KVKind.FULL, None) for i in range(layers)]
    spec = dense_spec(layers, heads, kv_heads, head_dim, hidden, intermediate, vocab, context, kinds=kinds)
    model = GridModel("prop/model", spec, checkpoint)
    gpu = GpuSku("big", "Big", "nvidia", memory_gib * GIB + 12_345, fp8_support=True)
    options = GridOptions(weight_dtypes=("bf16", "int4"), kv_dtypes=("auto", "fp8"), tp_sizes=(1, heads), pp_sizes=(2,))
    grid = build_capacity_grid([model], [gpu], options).collect()
    for i in random.Random(seed).sample(range(grid.height), min(16, grid.height)):
        row = grid.row(i, named=True)
        est = _estimate_row(row, model, gpu)
        contract = est.contract()
        for column in (
            *BYTE_COLUMNS,
            "num_blocks",
            "kv_cache_tokens",
            "physical_kv_token_slots",
            "b_max",
            "max_concurrency",
        ):
            assert row[column] == contract[column], (column, row)
        # and the first principles, in Python integers: whole blocks of the budget, no wrap-around
        assert row["kv_bytes_per_token"] == sum(
            2 * kv_heads * head_dim * (1 if row["kv_dtype"] == "fp8" else 2) for _ in range(layers)
        )
        usable = int(gpu.memory_total_bytes * row["gpu_memory_utilization"])
        if row["engine"] != "trtllm":
            most_loaded = usable - row["weights_bytes_per_gpu"] - row["overhead_bytes_per_gpu"]
            # vLLM at PP > 1 sizes every stage from its own weights and overhead (none above the most loaded's) and
            # every rank keeps the tightest stage's blocks; otherwise one budget, the most loaded stage's
            stages = est.stage_kv_budget_bytes
            assert row["kv_budget_bytes_per_gpu"] == (stages[est.pool.stage] if stages else most_loaded)
            assert min(stages, default=most_loaded) >= most_loaded
            if stages:  # the binding stage's whole blocks
                assert row["num_blocks"] == max(row["kv_budget_bytes_per_gpu"], 0) // est.pool.unit_bytes


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 10**7)), min_size=1, max_size=200))
def test_python_round_equals_round(pairs: list[tuple[int, int]]) -> None:
    frame = pl.LazyFrame(pairs, schema={"p": pl.Int64, "q": pl.Int64}, orient="row")
    got = with_python_round(frame, "p", "q", "r").collect().get_column("r").to_list()
    assert got == [round(p / q, 4) for p, q in pairs]


def test_python_round_on_ties() -> None:
    # quotients with five decimals ending in 5: where Polars' own round disagrees with Python
    pairs = [(p, q) for q in (16, 32, 80, 160, 320, 800, 1600, 2000, 3125, 6400, 20000) for p in range(0, 400)]
    frame = pl.LazyFrame(pairs, schema={"p": pl.Int64, "q": pl.Int64}, orient="row")
    got = with_python_round(frame, "p", "q", "r").collect().get_column("r").to_list()
    assert got == [round(p / q, 4) for p, q in pairs]
    assert Fraction(1, 160) == Fraction("0.00625") and round(1 / 160, 4) == 0.0063


def test_no_context_column_is_a_deployment_column() -> None:
    assert set(CONTEXT_COLUMNS) <= set(GRID_COLUMNS)
    assert not set(CONTEXT_COLUMNS) & set(DEPLOYMENT_KEYS)


def test_options_refuse_what_the_grid_cannot_price() -> None:
    with pytest.raises(ValueError, match="'plain'"):
        GridOptions(engines=("vllm", "plain"))
    with pytest.raises(ValueError, match="'nvfp4'"):
        GridOptions(weight_dtypes=("bf16", "nvfp4"))
    with pytest.raises(ValueError, match="PP sizes"):
        GridOptions(pp_sizes=(1, 2))


# --- the grid as four tables (GridTables) ----------------------------------------------------------


def _strings(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.col(pl.Categorical).cast(pl.String))


def test_grid_tables_join_back_to_the_grid(hand_grid: pl.DataFrame) -> None:
    tables = grid_tables(models(), gpus())
    assert_frame_equal(_strings(tables.grid()), _strings(hand_grid.select(GRID_COLUMNS)))
    # dense ids, every column at its grain
    assert tables.deployments.get_column("deployment_id").to_list() == list(range(tables.deployments.height))
    assert tables.layouts.get_column("layout_id").to_list() == list(range(tables.layouts.height))
    assert tables.contexts.get_column("deployment_id").is_sorted()
    assert set(tables.deployments.get_column("layout_id")) == set(tables.layouts.get_column("layout_id"))
    assert tables.gpus.get_column("gpu").to_list() == [g.id for g in gpus()]
    assert tables.contexts.columns == ["deployment_id", *TABLE_CONTEXT_COLUMNS]
    assert tables.contexts.schema["max_concurrency_e4"] == pl.Int64
    assert tables.context_limits is None
    # the two frames of the warehouse's star (deployments with every context-free column, contexts)
    rejoined = tables.context_rows().join(tables.deployment_rows(), on="deployment_id", maintain_order="left")
    assert_frame_equal(_strings(rejoined.select(GRID_COLUMNS)), _strings(hand_grid.select(GRID_COLUMNS)))


def test_grid_tables_in_chunks_are_the_tables_of_the_whole(hand_grid: pl.DataFrame) -> None:
    whole = grid_tables(models(), gpus(), concurrencies=TARGET_CONCURRENCIES)
    chunks = list(iter_grid_tables(models(), gpus(), concurrencies=TARGET_CONCURRENCIES, chunk_models=3))
    assert len(chunks) == 5
    for name in ("layouts", "deployments", "contexts", "context_limits"):
        assert_frame_equal(
            _strings(pl.concat([getattr(chunk, name) for chunk in chunks])), _strings(getattr(whole, name))
        )
    assert all(chunk.gpus.equals(whole.gpus) for chunk in chunks)


def test_grid_tables_context_limits_equal_build_context_limits(hand_grid: pl.DataFrame) -> None:
    tables = grid_tables(models(), gpus(), concurrencies=TARGET_CONCURRENCIES)
    assert tables.context_limits is not None
    keyed = (
        tables.context_limits.join(tables.deployments, on="deployment_id", maintain_order="left")
        .join(tables.layouts, on="layout_id", maintain_order="left")
        .join(tables.gpus, on="gpu_id", maintain_order="left")
        .select(*DEPLOYMENT_KEYS, "concurrency", "max_context")
    )
    expected = build_context_limits(hand_grid.lazy()).collect()
    assert_frame_equal(_strings(keyed), _strings(expected))


def test_grid_tables_with_other_options() -> None:
    options = GridOptions(engines=("vllm", "trtllm"), vllm_version="0.9", kv_dtypes=("auto",), pp_sizes=(2,))
    tables = grid_tables(models()[4:11], gpus(), options)
    expected = build_capacity_grid(models()[4:11], gpus(), options).select(GRID_COLUMNS).collect()
    assert_frame_equal(_strings(tables.grid()), _strings(expected))


def test_grid_tables_of_no_models_are_empty_with_the_schema() -> None:
    tables = grid_tables([], gpus())
    assert tables.layouts.height == tables.deployments.height == tables.contexts.height == 0
    assert tables.grid().columns == list(GRID_COLUMNS)
    assert [chunk.contexts.height for chunk in iter_grid_tables([], gpus())] == [0]


def test_grid_tables_sql_in_duckdb_is_the_grid(hand_grid: pl.DataFrame) -> None:
    import duckdb

    tables = grid_tables(models(), gpus())
    con = duckdb.connect()
    for name in ("gpus", "layouts", "deployments", "contexts"):
        con.register("frame", getattr(tables, name))
        con.execute(f"create table grid_{name} as select * from frame")
        con.unregister("frame")
    got = con.execute(f"{grid_tables_sql()} order by c.deployment_id, c.context").pl()
    assert_frame_equal(_strings(got), _strings(hand_grid.select(GRID_COLUMNS)), check_dtypes=False)
    assert got.schema["max_concurrency"] == pl.Float64 and got.schema["b_max"] == pl.Int64


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 1 << 46), min_size=1, max_size=300))
def test_concurrency_e4_divides_exactly_in_polars_and_duckdb(ks: list[int]) -> None:
    import duckdb

    frame = pl.DataFrame({"k": ks}, schema={"k": pl.Int64})
    con = duckdb.connect()
    con.register("frame", frame)
    in_duckdb = [row[0] for row in con.execute("select k / 10000 from frame").fetchall()]
    e4 = pl.col("max_concurrency_e4")
    tables = GridTables(
        gpus=pl.DataFrame(), layouts=pl.DataFrame(), deployments=pl.DataFrame(),
        contexts=frame.rename({"k": "max_concurrency_e4"}),
    )  # fmt: skip
    in_polars = tables.contexts.select(e4.cast(pl.Float64) / (e4 * 0 + 10_000).cast(pl.Float64)).to_series()
    assert in_duckdb == in_polars.to_list() == [k / 10_000 for k in ks]


def test_models_sharing_layers_share_the_kv_side_and_still_match_estimate() -> None:
    base = models()[0]  # llama-8b
    wider = tuple(replace(p, mlp=p.mlp * 2, attention=p.attention + 4096) for p in base.spec.layer_params)
    twin = GridModel("hand/llama-8b-wide", replace(base.spec, layer_params=wider))
    grid = build_capacity_grid([base, twin], gpus()).collect()
    tables = grid_tables([base, twin], gpus())
    assert_frame_equal(_strings(tables.grid()), _strings(grid.select(GRID_COLUMNS)))
    by_model = {base.repo_id: base, twin.repo_id: twin}
    _assert_rows_match(grid, _stratified(grid, 20, seed=6), by_model, {g.id: g for g in gpus()})
    weights = grid.group_by("model").agg(pl.col("weights_bytes_per_gpu").max()).sort("model")
    assert weights.get_column("weights_bytes_per_gpu").n_unique() == 2  # not shared: the weights differ


def test_grid_charges_the_graphs_by_the_gpus_all_reduce_path_like_estimate() -> None:
    """Two GPUs with the same nvlink_multicast (False) but different links: A100 SXM's NVSwitch runs vLLM's
    custom all-reduce at TP 4, L40S (PCIe) does not, so their CUDA-graph charges differ at TP 4 only; every
    row equals `estimate` (the rule is applied once, in engines.vllm.overhead.custom_all_reduce_on)."""
    skus = [
        GpuSku("a100-sxm-80gb", "A100", "nvidia", 84_987_740_160, architecture="ampere", interconnect="NVLink3"),
        GpuSku("l40s-48gb", "L40S", "nvidia", 47_697_362_944, fp8_support=True, architecture="ada",
               interconnect="PCIe Gen4 x16 (no NVLink)"),
    ]  # fmt: skip
    assert [g.nvlink_multicast for g in skus] == [False, False] and [g.peer_link_gpus for g in skus] == [8, 1]
    llama = models()[:1]
    grid = build_capacity_grid(llama, skus, GridOptions(engines=("vllm",), tp_sizes=(1, 4))).collect()
    _assert_rows_match(grid, list(range(grid.height)), {m.repo_id: m for m in llama}, {g.id: g for g in skus})
    per = grid.group_by("gpu", "tp").agg(pl.col("overhead_bytes_per_gpu").first()).sort("gpu", "tp")
    overhead = {(r["gpu"], r["tp"]): r["overhead_bytes_per_gpu"] for r in per.iter_rows(named=True)}
    assert overhead["a100-sxm-80gb", 1] == overhead["l40s-48gb", 1]
    assert overhead["l40s-48gb", 4] > overhead["a100-sxm-80gb", 4]


@pytest.mark.parametrize("version", ["0.5.2", "0.6.1", "0.7.3"])
def test_v0_releases_profile_the_batch_their_rules_pick(version: str) -> None:
    """On a V0 release the default batch follows the model (a sliding window, a vision tower, the length:
    `ec.VLLM_V0_BATCH_RULES`), so two models that differ only in a window must not share the grid's defaults
    (its model classes): every row equals `estimate`'s, overhead included, and the windowed model profiles a
    bigger batch than the full one wherever the release turns chunked prefill on (its overhead is larger)."""
    full = dense_spec(layers=8, kv_heads=8, hidden=2048, intermediate=8192, context=65536)
    windowed = dense_spec(layers=8, kv_heads=8, hidden=2048, intermediate=8192, context=65536,
                          kinds=[(KVKind.SLIDING, 4096)] * 8)  # fmt: skip
    grid_models = [GridModel("hand/full-64k", full), GridModel("hand/windowed-64k", windowed)]
    options = GridOptions(engines=("vllm",), vllm_version=version, weight_dtypes=("bf16",), kv_dtypes=("auto",),
                          tp_sizes=(1,))  # fmt: skip
    grid = build_capacity_grid(grid_models, gpus()[:2], options).collect()
    by_model, by_gpu = {m.repo_id: m for m in grid_models}, {g.id: g for g in gpus()}
    _assert_rows_match(grid, list(range(grid.height)), by_model, by_gpu)
    overhead = dict(grid.group_by("model").agg(pl.col("overhead_bytes_per_gpu").max()).iter_rows())
    chunked = version != "0.5.2"  # 0.5.3 on: chunked prefill above 32,768 tokens, but not with a window
    assert (overhead["hand/windowed-64k"] > overhead["hand/full-64k"]) is chunked


def test_measured_sizing_release_rows_equal_estimate() -> None:
    """vLLM 0.34 (`KvSizing.MEASURED`: the extensible KV cache at its default utilization 1.0, where the device's free
    memory is the bound): every column of the grid's rows equals `estimate`'s, ROCm's 3 GiB margin floor and 16-token
    block, the 64-token block elsewhere, MLA's and the hybrids' blocks included."""
    options = GridOptions(engines=("vllm",), vllm_version="0.34", weight_dtypes=("bf16",), kv_dtypes=("auto",))
    grid = build_capacity_grid(models(), gpus(), options).collect()
    assert set(grid.get_column("engine_version").unique()) == {"0.34"}
    by_model, by_gpu = {m.repo_id: m for m in models()}, {g.id: g for g in gpus()}
    _assert_rows_match(grid, _stratified(grid, 4, seed=34), by_model, by_gpu)
    dense = grid.filter(pl.col("model") == "hand/llama-8b")
    blocks = dict(dense.group_by("gpu").agg(pl.col("block_size").unique()).iter_rows())
    assert blocks == {gpu.id: ([16] if gpu.amd else [64]) for gpu in gpus() if gpu.id in blocks}
    assert (grid.get_column("gpu_memory_utilization") == 1.0).all()
