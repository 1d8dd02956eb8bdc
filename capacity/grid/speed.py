"""The speed columns: a layout's `capacity.performance.rank_weight_terms` and `rank_kv_terms` as row values, and
TPOT / output tokens per second of the context rows (the same formulas, on columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from capacity.features.parallel_layout import RankLayout, dp_group_b_max
from capacity.grid.columns import PERF_COLUMNS, PERF_WINDOW_SLOTS
from capacity.grid.staged import StagedRows
from capacity.numeric import Num, as_float, at_least, choose
from capacity.performance import PerfEfficiency, PerfInputs, rank_kv_terms, rank_weight_terms
from capacity.serving.closed_loop import ClosedLoopParts, closed_loop_parts, from_parts, grid_lengths
from capacity.spec import ModelSpec
from capacity.weights import WeightsEstimate


def _perf_weight_row(
    spec: ModelSpec, tp: int, pp: int, weight_dtype: str, engine: str, w: WeightsEstimate, layout: RankLayout
) -> tuple[object, ...]:
    """`capacity.performance.rank_weight_terms` of one layout as the weight row's perf columns (`_PERF_WEIGHTS`), and
    the all-to-all's terms of a DP x EP layout as `perf_inputs` reads them from the estimate's layout."""
    rank_layout = None if layout.plain else layout  # as `Estimate.layout`
    terms = rank_weight_terms(
        spec, tp=tp, pp=pp, weight_dtype=weight_dtype, engine=engine, weights_bytes_per_gpu=w.per_gpu_bytes,
        weight_format_name=w.format_name, layout=rank_layout,
    )
    dense_terms = (terms.dense_weight_bytes, terms.expert_weight_bytes, terms.active_params)
    rank_terms = (float(terms.layers_on_rank), float(terms.act_bytes), terms.fp8_gemm, float(terms.moe_layers_on_rank))
    return (*dense_terms, *rank_terms, *_exchange(rank_layout))


def _perf_kv_row(kv_view: ModelSpec, attention_tp: int, pp: int, kv_bytes: int) -> tuple[float, ...]:
    """`capacity.performance.rank_kv_terms` of a KV layout as its row's perf columns (`_PERF_KV_TERMS`): windows in
    slots, those past the slots read as full layers (an over-estimate of the bytes)."""
    terms = rank_kv_terms(kv_view, attention_tp=attention_tp, pp=pp, kv_element_bytes=kv_bytes)
    slots: list[float] = []
    extra_kv = extra_attn = 0.0
    for j, (window, kv, attn) in enumerate(terms.windowed):
        if j < PERF_WINDOW_SLOTS:
            slots += [float(window), kv, attn]
        else:
            extra_kv, extra_attn = extra_kv + kv, extra_attn + attn
    slots += [1.0, 0.0, 0.0] * (PERF_WINDOW_SLOTS - min(len(terms.windowed), PERF_WINDOW_SLOTS))
    return (terms.full_kv_bytes_per_token + extra_kv, terms.attention_flops_per_cached_token + extra_attn, *slots)


def _exchange(layout: RankLayout | None) -> tuple[float, float]:
    """(the ranks an MoE layer's tokens are exchanged over, the DP ranks whose tokens reach its experts): the
    `PerfInputs.ep` and `expert_token_ranks` that `perf_inputs` reads from the layout (1, 1 without one)."""
    if layout is None:
        return 1.0, 1.0
    return float(layout.token_exchange_ranks), float(layout.dp)


def _perf_keep() -> list[str]:
    return ["state_bytes_per_sequence_per_gpu", *PERF_COLUMNS]


def used_window_slots(deployments: pl.DataFrame) -> tuple[int, ...]:
    """The perf window slots that some row of `deployments` fills. A slot left at its padding on every
    row (0 KV bytes, 0 attention FLOPs, a finite window) adds 0.0 x min(T, window) = 0.0 to the KV
    and FLOP sums, which are never negative: those sums are the same without it, so `_with_speed`
    may leave it out (fewer operations on every context row)."""
    if deployments.height == 0:
        return tuple(range(PERF_WINDOW_SLOTS))
    padding = [
        ((pl.col(f"perf_win_{j}_kv") == 0) & (pl.col(f"perf_win_{j}_attn") == 0) & pl.col(f"perf_win_{j}_tokens").is_finite())
        .fill_null(False)
        .all()
        .alias(str(j))
        for j in range(PERF_WINDOW_SLOTS)
    ]
    unused = deployments.select(padding).row(0)
    return tuple(j for j in range(PERF_WINDOW_SLOTS) if not unused[j])


def _with_speed(
    rows: StagedRows, batch: Num, context: Num, slots: Sequence[int] = tuple(range(PERF_WINDOW_SLOTS))
) -> StagedRows:
    """TPOT and output tokens/s of a decode step of `batch` sequences of `context` tokens: the same
    `capacity.performance` formulas, on columns (null where the GPU lacks bandwidth / FLOPS data or
    no sequence fits). Only the window `slots` given are read (`used_window_slots`)."""
    col = rows.col
    columns: dict[str, Any] = dict(
        dense_weight_bytes=col("perf_dense_bytes"), expert_weight_bytes=col("perf_expert_bytes"),
        num_experts=col("perf_num_experts"), experts_per_token=col("perf_experts_per_token"),
        active_params=col("perf_active_params"), full_kv_bytes_per_token=col("perf_full_kv"),
        windowed_kv=tuple((col(f"perf_win_{j}_kv"), col(f"perf_win_{j}_tokens")) for j in slots),
        state_bytes_per_sequence=col("state_bytes_per_sequence_per_gpu"),
        attention_flops_per_cached_token=col("perf_attn_full"),
        windowed_attention=tuple(
            (col(f"perf_win_{j}_attn"), col(f"perf_win_{j}_tokens")) for j in slots
        ),
        hidden_size=col("perf_hidden"), layers_on_rank=col("perf_layers"), act_bytes=col("perf_act_bytes"),
        tp=col("perf_tp"), pp=col("perf_pp"), bandwidth_bytes_per_s=col("perf_bandwidth"),
        flops_per_s=choose(col("perf_fp8_gemm"), col("perf_fp8_flops"), col("perf_bf16_flops")),
        link_bytes_per_s=col("perf_link"), moe_layers_on_rank=col("perf_moe_layers"),
        ep=col("perf_exchange_ranks"), expert_token_ranks=col("perf_dp_ranks"),
    )  # fmt: skip
    p = PerfInputs(**columns)
    factors: dict[str, Any] = dict(
        memory_bandwidth=col("perf_eff_memory"), compute=col("perf_eff_compute"),
        step_overhead_s=col("perf_step_s"), allreduce_latency_s=col("perf_allreduce_s"),
    )  # fmt: skip
    eff = PerfEfficiency(**factors)
    input_tokens, output_tokens = grid_lengths(context)
    chunk = col("pool_max_num_batched_tokens")
    chunk = choose(chunk > 0, chunk, input_tokens)
    running = at_least(as_float(batch), 1)
    parts = closed_loop_parts(p, running, input_tokens, output_tokens, chunk, eff)
    computed = {"_decode": parts.decode_s, "_prefill": parts.prefill_s, "_wave": parts.wave_s, "_steps": parts.wave_steps}
    rows = rows.with_columns(computed)
    held = ClosedLoopParts(col("_decode"), col("_prefill"), col("_wave"), col("_steps"))
    closed = from_parts(held, running, output_tokens, col("perf_pp"), col("perf_wave_share"))
    rows = rows.with_columns({"_tpot": closed.tpot_s, "_per_rank": closed.output_tokens_per_s})
    tpot = col("_tpot")
    ok = (batch >= 1) & tpot.is_not_null() & tpot.is_finite()
    # one replica's: a DP group's ranks each run their own closed loop of b_max (`parallel_layout.dp_group_b_max`)
    per_second = dp_group_b_max(col("perf_dp_ranks"), col("_per_rank"))
    rows = rows.with_columns({"tpot_ms": choose(ok, tpot * 1e3, None), "output_tokens_per_second": choose(ok, per_second, None)})
    return rows.drop("_tpot", "_per_rank", *computed)
