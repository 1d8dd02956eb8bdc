"""The grid as four tables at their own grain (`GridTables`), the SQL that joins them back, and their
collection for a fleet in chunks (`iter_grid_tables`)."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

import polars as pl
import polars.selectors as cs

from capacity.columns import grid_schema, grid_select
from capacity.grid.columns import (
    _F64,
    _ID,
    CONTEXT_COLUMNS,
    DEPLOYMENT_ONLY_COLUMNS,
    GPU_COLUMNS,
    GRID_COLUMNS,
    LAYOUT_COLUMNS,
    TABLE_CONTEXT_COLUMNS,
    VIEW_DEPLOYMENT_ONLY_COLUMNS,
    VIEW_DERIVED_COLUMNS,
    VIEW_GPU_COLUMNS,
    VIEW_LAYOUT_COLUMNS,
    VIEW_SETTINGS_COLUMNS,
    VIEW_SHAPE_COLUMNS,
    derived_deployment_columns,
    pool_window_columns,
)
from capacity.grid.contexts import _at_contexts, _exact_divisor
from capacity.grid.frames import (
    _FITS,
    _GROUP,
    _fits_smallest,
    _Frames,
    _frames,
    _keep,
    _multi,
    _not_fitting,
    _ordered,
    _shape_frame,
    _single,
    _view_keep,
    _with_windows,
    served_frames,
)
from capacity.grid.limits import _LIMIT_INPUTS, max_contexts
from capacity.grid.options import GridModel, GridOptions
from capacity.grid.planning import (
    RegistryState,
    _build_tables,
    _Registry,
    _registry,
    _registry_from_state,
    _registry_state,
    _Shape,
    _Tables,
)
from capacity.grid.sizing import _window_count
from capacity.grid.speed import used_window_slots
from capacity.grid.staged import FrameRows
from capacity.spec import GpuSku


@dataclass(frozen=True, slots=True)
class GridTables:
    """The grid as four tables that join back to `build_capacity_grid` exactly, each column stored at
    its own grain, so that a 10M-row grid writes a tenth of the values:

    - `gpus`: gpu_id, GPU_COLUMNS (one row per GPU);
    - `layouts`: layout_id, LAYOUT_COLUMNS (model x engine x dtypes x TP x PP: what the deployments
      of a layout on every GPU share, the strings among it);
    - `deployments`: deployment_id, layout_id, gpu_id, DEPLOYMENT_ONLY_COLUMNS (settings, overhead,
      budget and pool of a layout on a GPU);
    - `contexts`: deployment_id, TABLE_CONTEXT_COLUMNS (one row per deployment and grid context):
      CONTEXT_COLUMNS with `max_concurrency_e4`, the printed concurrency times 10,000 as an exact
      Int64, in place of max_concurrency. max_concurrency is `max_concurrency_e4 / 10000`, one
      correctly rounded division (Polars with a column divisor, DuckDB's `/` on a BIGINT and an
      INTEGER): stored so, the column compresses as an integer, at a fraction of a double's cost.

    Ids are Int32, dense and in `build_capacity_grid`'s order (deployments by model, GPU, layout;
    contexts by deployment, context), counting from the `first_*` ids given: tables of consecutive
    model chunks concatenate into the tables of all of them. Strings are Categorical, every other
    column has the grid's dtype. `grid()` joins them back."""

    gpus: pl.DataFrame
    layouts: pl.DataFrame
    deployments: pl.DataFrame
    contexts: pl.DataFrame
    # deployment_id, concurrency, max_context (`build_context_limits`), where asked for
    context_limits: pl.DataFrame | None = None
    # deployment_id and the pool columns `max_contexts` reads, where asked for (`pools=True`)
    pools: pl.DataFrame | None = None
    # the context rows kept as their inputs (`grid_tables(context_view=True)`): `contexts` is empty;
    # deployments hold VIEW_DEPLOYMENT_ONLY_COLUMNS (their settings row the rest of DEPLOYMENT_ONLY_COLUMNS);
    # deployments, layouts and gpus also hold VIEW_*_COLUMNS, which `capacity.grid.view.context_view_sql`
    # (DuckDB) and `context_rows` (Polars) read; `speed`: whether the speed columns are computed
    context_view: bool = False
    speed: bool = True
    # a context view's pool shapes (shape_id, VIEW_SHAPE_COLUMNS, the window terms) and engine settings
    # (settings_id, VIEW_SETTINGS_COLUMNS): numbered for the whole build, each chunk's hold every row
    # known when it was collected (the last chunk's: all of them)
    pool_shapes: pl.DataFrame | None = None
    settings: pl.DataFrame | None = None

    def shifted(self, layouts: int, deployments: int) -> GridTables:
        """The same tables with layout ids counting from `layouts` more and deployment ids from `deployments` more:
        a chunk built with ids from 0 placed after chunks holding that many layouts and deployments."""
        if not layouts and not deployments:
            return self
        layout_id, deployment_id = pl.col("layout_id") + layouts, pl.col("deployment_id") + deployments

        def moved(frame: pl.DataFrame, *ids: pl.Expr) -> pl.DataFrame:
            return frame.with_columns(*(i.cast(frame.schema[i.meta.output_name()]) for i in ids))

        limits, pools = self.context_limits, self.pools
        return replace(
            self,
            layouts=moved(self.layouts, layout_id),
            deployments=moved(self.deployments, deployment_id, layout_id),
            contexts=moved(self.contexts, deployment_id),
            context_limits=None if limits is None else moved(limits, deployment_id),
            pools=None if pools is None else moved(pools, deployment_id),
        )

    def with_shape_ids(self, ids: Sequence[int]) -> GridTables:
        """A context view's tables with each deployment's pool shape id `s` renumbered `ids[s]` (the ids another
        build gives the same shapes: `GridBuild.adopt_shapes`)."""
        if not self.context_view:
            return self
        renumbered = pl.col("shape_id").replace_strict(list(range(len(ids))), list(ids), return_dtype=_ID)
        return replace(self, deployments=self.deployments.with_columns(renumbered))

    def with_view_tables(self, pool_shapes: pl.DataFrame | None, settings: pl.DataFrame | None) -> GridTables:
        """The same tables carrying these pool shapes and settings (a context view's, `GridBuild.view_tables`)."""
        return replace(self, pool_shapes=pool_shapes, settings=settings) if self.context_view else self

    def context_rows(self) -> pl.DataFrame:
        """deployment_id, CONTEXT_COLUMNS: the contexts with max_concurrency as a Float64 (exactly
        `build_capacity_grid`'s: a division by a column, which Polars does not turn into a
        multiplication by the reciprocal as it does a division by a literal)."""
        if self.context_view:
            return self._computed_context_rows()
        e4 = pl.col("max_concurrency_e4")
        concurrency = (e4.cast(_F64) / _exact_divisor(e4, 10_000)).alias("max_concurrency")
        return self.contexts.with_columns(concurrency).select("deployment_id", *CONTEXT_COLUMNS)

    def _computed_context_rows(self) -> pl.DataFrame:
        """The context rows of a context view, computed by Polars from the inputs the tables keep."""
        assert self.pool_shapes is not None and self.settings is not None
        rows = (
            self.deployments.lazy()
            .join(self.layouts.lazy(), on="layout_id", how="left", maintain_order="left")
            .join(self.gpus.lazy(), on="gpu_id", how="left", maintain_order="left")
            .join(self.pool_shapes.lazy(), on="shape_id", how="left", maintain_order="left")
            .join(self.settings.lazy(), on="settings_id", how="left", maintain_order="left")
            .with_columns(pl.col("tp").alias("perf_tp"), pl.col("pp").alias("perf_pp"))
            .explode("grid_contexts")
            .rename({"grid_contexts": "context"})
        )
        windows = _window_count(rows)
        staged = _at_contexts(FrameRows(rows), windows, speed=self.speed)
        assert isinstance(staged, FrameRows)
        return staged.frame.select("deployment_id", *CONTEXT_COLUMNS).collect()

    def deployment_rows(self) -> pl.DataFrame:
        """deployment_id, then every context-free column of GRID_COLUMNS (layout and GPU joined)."""
        deployment_columns = [c for c in GRID_COLUMNS if c not in CONTEXT_COLUMNS]
        return (
            self._deployment_only()
            .join(self.layouts, on="layout_id", how="left", maintain_order="left")
            .join(self.gpus, on="gpu_id", how="left", maintain_order="left")
            .select("deployment_id", *deployment_columns)
        )

    def _deployment_only(self) -> pl.DataFrame:
        """`deployments` with every DEPLOYMENT_ONLY_COLUMNS column: a context view's settings row holds some, and
        some follow from the others (VIEW_DERIVED_COLUMNS)."""
        if not self.context_view:
            return self.deployments
        assert self.settings is not None
        held = [c for c in DEPLOYMENT_ONLY_COLUMNS if c not in (*VIEW_DEPLOYMENT_ONLY_COLUMNS, *VIEW_DERIVED_COLUMNS)]
        derived = [expr.alias(name) for name, expr in derived_deployment_columns(pl.col).items()]
        return self.deployments.join(
            self.settings.select("settings_id", *held), on="settings_id", how="left", maintain_order="left"
        ).with_columns(derived)

    def grid(self) -> pl.DataFrame:
        """GRID_COLUMNS, one row per deployment and context (`build_capacity_grid` without the pool columns)."""
        return (
            self.context_rows()
            .join(self._deployment_only(), on="deployment_id", how="left", maintain_order="left")
            .join(self.layouts, on="layout_id", how="left", maintain_order="left")
            .join(self.gpus, on="gpu_id", how="left", maintain_order="left")
            .select(grid_select())
        )


def grid_tables_sql(
    contexts: str = "grid_contexts",
    deployments: str = "grid_deployments",
    layouts: str = "grid_layouts",
    gpus: str = "grid_gpus",
) -> str:
    """A SQL SELECT (DuckDB) of GRID_COLUMNS over the four GridTables stored under these names: the
    grid, one row per deployment and context, as `build_capacity_grid` gives it (same values, the
    doubles included: max_concurrency is `max_concurrency_e4 / 10000`, which DuckDB divides as
    doubles, correctly rounded)."""
    source = {c: "c" for c in CONTEXT_COLUMNS} | {c: "l" for c in LAYOUT_COLUMNS} | {c: "g" for c in GPU_COLUMNS}
    source |= {c: "d" for c in DEPLOYMENT_ONLY_COLUMNS}
    expression = {c: f"{source[c]}.{c}" for c in GRID_COLUMNS}
    expression["max_concurrency"] = "c.max_concurrency_e4 / 10000 AS max_concurrency"
    columns = ",\n    ".join(expression[c] for c in GRID_COLUMNS)
    return (
        f"SELECT\n    {columns}\nFROM {contexts} AS c\n"
        f"JOIN {deployments} AS d USING (deployment_id)\n"
        f"JOIN {layouts} AS l USING (layout_id)\n"
        f"JOIN {gpus} AS g USING (gpu_id)"
    )



def grid_tables(
    models: Sequence[GridModel],
    gpus: Sequence[GpuSku],
    options: GridOptions | None = None,
    *,
    concurrencies: Sequence[int] | None = None,
    first_layout_id: int = 0,
    first_deployment_id: int = 0,
    pools: bool = False,
    contexts: bool = True,
    context_view: bool = False,
) -> GridTables:
    """The grid of `models` x `gpus` as GridTables (collected), with the context limits at
    `concurrencies` if given and the deployments' pools if `pools`; `contexts=False` leaves the
    context rows empty (a caller that needs only the deployments); `context_view=True` keeps their
    inputs instead of them (`GridTables.context_view`). See `iter_grid_tables` for a fleet
    in chunks, which also overlaps the Python and the Polars parts."""
    options = options or GridOptions()
    reg = _registry(models, gpus, options)
    t = _build_tables(reg, models, pp1_only=True)
    ids = (first_layout_id, first_deployment_id)
    return _collect_tables(
        t, models, 0, *ids, concurrencies, pools=pools, contexts=contexts, context_view=context_view
    )


def iter_grid_tables(
    models: Sequence[GridModel],
    gpus: Sequence[GpuSku],
    options: GridOptions | None = None,
    *,
    concurrencies: Sequence[int] | None = None,
    chunk_models: int = 192,
    context_view: bool = False,
) -> Iterator[GridTables]:
    """`grid_tables` of consecutive chunks of `chunk_models` models, ids continuing from chunk to
    chunk: concatenated, the chunks' layouts, deployments and contexts are `grid_tables(models, gpus,
    options)`'s (every chunk carries the same `gpus`). A chunk is collected by Polars in a worker
    thread (Polars releases the GIL) while the next one is planned (the per-layout Python part), so
    that on two cores the two overlap; a consumer that writes each chunk from a thread of its own
    overlaps that too. The models share one registry (engine settings, pool shapes, KV layouts)."""
    if not models:
        yield grid_tables(models, gpus, options, concurrencies=concurrencies, context_view=context_view)
        return
    yield from GridBuild(models, gpus, options, concurrencies=concurrencies, context_view=context_view).chunks(
        chunk_models=chunk_models
    )


class GridBuild:
    """One build of the grid tables of a fleet: the registry its chunks share (the engine settings, numbered for the
    whole fleet; the pool shapes, numbered as they are met) and the chunks planned and collected from it.

    The registry is a function of the models, GPUs and options, so two builds of the same fleet (in two processes)
    number the settings alike; their pool shapes differ by the order they were met in, which `shapes` and
    `adopt_shapes` translate. That lets a caller build a range of the fleet elsewhere and join its chunks to this
    build's (`GridTables.with_shape_ids`, `GridTables.shifted`)."""

    def __init__(
        self,
        models: Sequence[GridModel],
        gpus: Sequence[GpuSku],
        options: GridOptions | None = None,
        *,
        concurrencies: Sequence[int] | None = None,
        context_view: bool = False,
        registry: RegistryState | None = None,
        first_model: int = 0,
    ) -> None:
        """`registry`: another build's (`registry()`), for the same fleet; then `models` may be the fleet's models
        from number `first_model` on, and `chunks` count models as the fleet does."""
        if first_model and registry is None:
            raise ValueError("first_model needs the fleet's registry")
        self.models = models
        self.first_model = first_model
        self.concurrencies = concurrencies
        self.context_view = context_view
        options = options or GridOptions()
        if registry is None:
            self._reg = _registry(models, gpus, options)
        else:
            self._reg = _registry_from_state(gpus, options, registry)

    def registry(self) -> RegistryState:
        """The registry's engine settings and model plans, picklable: another build of the same models, GPUs and
        options takes them (`GridBuild(..., registry=...)`) instead of computing them again."""
        return _registry_state(self._reg)

    def chunks(
        self,
        start: int = 0,
        stop: int | None = None,
        *,
        chunk_models: int = 192,
        collected: Callable[[GridTables], None] | None = None,
    ) -> Iterator[GridTables]:
        """The tables of models `start` .. `stop` - 1 in chunks of `chunk_models`, ids counting from 0 at `start`
        (see `iter_grid_tables`: each chunk is collected in a worker thread while the next is planned). `collected`
        is called with each chunk in that thread as soon as it is collected, in order; the chunk is yielded after
        the next one is planned."""
        stop = self.first_model + len(self.models) if stop is None else stop
        step = max(1, chunk_models)
        ranges = [
            (begin, self.models[begin - self.first_model : min(begin + step, stop) - self.first_model])
            for begin in range(start, stop, step)
        ]
        report = None if collected is None else (lambda _begin, tables: collected(tables))
        yield from self.chunks_of(ranges, continued_ids=True, collected=report)

    def chunks_of(
        self,
        ranges: Iterable[tuple[int, Sequence[GridModel]]],
        *,
        continued_ids: bool = False,
        collected: Callable[[int, GridTables], None] | None = None,
    ) -> Generator[GridTables, None, None]:
        """The tables of each range of the fleet's models (the fleet index of its first model, its models; taken one
        at a time, when the one before is planned), in order: ids from 0 in each chunk, or continuing from chunk to
        chunk (`continued_ids`). Each chunk is collected in a worker thread while the next is planned;
        `collected(first model, tables)` is called in that thread as soon as a chunk is collected, and the chunk is
        yielded after the next one is planned."""
        next_ids = [0, 0]  # layout, deployment

        def collect(t: _Tables, begin: int, models: Sequence[GridModel]) -> GridTables:
            # one worker: chunks are collected in order, each after the one before has its ids
            layout_id, deployment_id = next_ids
            tables = _collect_tables(
                t, models, begin, layout_id, deployment_id, self.concurrencies, context_view=self.context_view
            )
            if continued_ids:
                next_ids[0] += tables.layouts.height
                next_ids[1] += tables.deployments.height
            if collected is not None:
                collected(begin, tables)
            return tables

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="grid") as worker:
            pending: Future[GridTables] | None = None
            for begin, models in ranges:
                t = _build_tables(self._reg, models, begin, pp1_only=True)
                submitted = worker.submit(collect, t, begin, models)
                if pending is not None:
                    yield pending.result()
                pending = submitted
            if pending is not None:
                yield pending.result()

    def shapes(self) -> list[_Shape]:
        """The pool shapes met so far, in id order (what `adopt_shapes` of another build of the fleet reads)."""
        with self._reg.lock:
            return list(self._reg.shape_ids)  # numbered in insertion order

    def adopt_shapes(self, shapes: Sequence[_Shape]) -> list[int]:
        """This build's id of each of another build's pool shapes (`shapes()` there), numbering those not met here."""
        with self._reg.lock:
            return [self._reg.shape_id(shape) for shape in shapes]

    def view_tables(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """A context view's pool shapes and engine settings, as far as this build has met them."""
        return _view_tables(self._reg)


def _collect_tables(
    t1: _Tables,
    models: Sequence[GridModel],
    first: int,
    first_layout_id: int,
    first_deployment_id: int,
    concurrencies: Sequence[int] | None = None,
    *,
    pools: bool = False,
    contexts: bool = True,
    context_view: bool = False,
) -> GridTables:
    """The tables of one chunk from its PP = 1 rows `t1`. The PP = 1 deployments are sized first;
    the PP > 1 layouts are then planned only where they are needed (the node's TP, where PP = 1
    does not fit): most PP > 1 layouts would have no deployment, and planning them is half the
    per-layout Python work."""
    f1 = _frames(t1)
    # a context view with no limits or pools asked keeps per deployment only what its tables store: the
    # pool's shape, the speed terms and the settings stay at their own grain (ids), not copied onto
    # every deployment through the sort
    narrow = context_view and concurrencies is None and not pools
    parts, deployments = _sized_deployments(t1, f1, models, first, first_deployment_id, narrow)
    windows = max(f.windows for f, _ in parts)
    # the layouts some GPU serves, numbered densely by model, then PP = 1 before PP > 1 (the order
    # of a model's layouts whatever the chunks)
    ranks = parts[-1][0].layouts
    key = pl.col("model_idx") * ranks + pl.col("_rank")
    used = deployments.select(key.unique().sort()).to_series()
    layouts = _layouts_table([f for f, _ in parts], key, used, first_layout_id, context_view)
    gpu_extra = VIEW_GPU_COLUMNS if context_view else ()  # a context view keeps the GPU's rates
    # one row per deployment and context: a join on the model's contexts (in order) expands them
    if narrow:  # the context view computes them when read
        context_rows = pl.LazyFrame(schema={"deployment_id": _ID, **_table_context_schema()})
    else:
        model_contexts = f1.model_frame.select("model_idx", pl.col("contexts").alias("context")).explode("context")
        if not contexts or context_view:
            model_contexts = model_contexts.head(0)
        context_rows = deployments.lazy().join(model_contexts, on="model_idx", how="inner", maintain_order="left")
        slots = used_window_slots(deployments)
        staged = _at_contexts(FrameRows(context_rows), windows, scaled=True, speed=t1.reg.options.speed, slots=slots)
        assert isinstance(staged, FrameRows)
        context_rows = staged.frame.select(pl.col("deployment_id").cast(_ID), *TABLE_CONTEXT_COLUMNS)
    layout_id = used.search_sorted(deployments.select(key).to_series()) + first_layout_id
    gpus = f1.gpu_frame.select(pl.col("gpu_idx").cast(_ID).alias("gpu_id"), *GPU_COLUMNS, *gpu_extra)
    limits = max_contexts(deployments, concurrencies) if concurrencies is not None else None
    deployment_extra: list[pl.Expr] = []
    pool_shapes = settings = None
    if context_view:
        deployment_extra = [
            pl.col("_shape").cast(_ID).alias("shape_id"), pl.col("settings_id").cast(_ID), pl.col("pool_swa_capacity")
        ]
        pool_shapes, settings = _view_tables(t1.reg)
    return GridTables(
        gpus=gpus.collect(),
        layouts=layouts,
        deployments=deployments.select(
            pl.col("deployment_id").cast(_ID),
            layout_id.cast(_ID).alias("layout_id"),
            pl.col("gpu_idx").cast(_ID).alias("gpu_id"),
            *(VIEW_DEPLOYMENT_ONLY_COLUMNS if context_view else DEPLOYMENT_ONLY_COLUMNS),
            *deployment_extra,
        ),
        contexts=context_rows.collect(),
        context_limits=limits,
        pools=deployments.select(pl.col("deployment_id").cast(_ID), *_LIMIT_INPUTS, cs.starts_with("pool_"))
        if pools
        else None,
        context_view=context_view,
        speed=t1.reg.options.speed,
        pool_shapes=pool_shapes,
        settings=settings,
    )


def _sized_deployments(
    t1: _Tables, f1: _Frames, models: Sequence[GridModel], first: int, first_deployment_id: int, narrow: bool
) -> tuple[list[tuple[_Frames, pl.LazyFrame]], pl.DataFrame]:
    """The chunk's deployments, sized and numbered in the published order: PP = 1 first, then the PP > 1 layouts
    planned where PP = 1 at the node's TP does not fit; with the frames of each part. `narrow` keeps only what a
    context view's deployments table stores (`frames._view_keep`)."""

    def keep(windows: int) -> list[str]:
        return _view_keep() if narrow else _keep(windows)

    extra = [c for c in (*_GROUP, "tp", "dp", "node_tp") if c not in keep(0)]
    # the sizing (joins, then column arithmetic on a few hundred thousand rows) costs less CPU on
    # Polars' in-memory engine; the context rows (a join that multiplies rows, then arithmetic) less
    # on the streaming engine, its default
    sized = _single(f1).with_columns(_fits_smallest(f1.windows))
    single = sized.select(*keep(f1.windows), *extra, _FITS).collect(engine="in-memory")
    not_fitting = _not_fitting(single.lazy()).collect()
    groups: dict[int, tuple[set[int], set[tuple[int, int, int]]]] = {}
    for m, e, w, k, _gpu, node_tp in not_fitting.iter_rows():
        tps, wanted = groups.setdefault(m, (set(), set()))
        tps.add(node_tp)
        wanted.add((e, k, w))
    parts = [(f1, single.lazy())]
    if groups:
        rank_base, kv_base = f1.layouts, t1.kv_base + len(t1.kv_layouts)
        t2 = _build_tables(t1.reg, models, first, pp_groups=groups, rank_base=rank_base, kv_base=kv_base)
        f2 = _frames(t2)
        parts.append((f2, _multi(f2, not_fitting.lazy())))
    windows = max(f.windows for f, _ in parts)
    kept = keep(windows)
    deployments = (
        _ordered(
            pl.concat([(frame if narrow else _with_windows(frame, f.windows, windows)).select(kept) for f, frame in parts]),
            len(t1.reg.gpus),
            parts[-1][0].layouts,
        )
        .with_row_index("deployment_id", offset=first_deployment_id)
        .collect(engine="in-memory")
    )
    return parts, deployments


def _table_context_schema() -> dict[str, pl.DataType | type[pl.DataType]]:
    """The dtypes of TABLE_CONTEXT_COLUMNS: the grid's, `max_concurrency_e4` an exact Int64."""
    schema = grid_schema()
    return {c: pl.Int64 if c == "max_concurrency_e4" else schema[c] for c in TABLE_CONTEXT_COLUMNS}


def _layouts_table(
    frames: Sequence[_Frames], key: pl.Expr, used: pl.Series, first_layout_id: int, context_view: bool
) -> pl.DataFrame:
    """The layouts some GPU serves (`used` values of `key`), numbered from `first_layout_id`; a context
    view's also keep the speed terms and the model's grid contexts."""
    extra = [c for c in VIEW_LAYOUT_COLUMNS if c != "grid_contexts"] if context_view else []
    layouts = (
        pl.concat([f.full.select("model_idx", "_rank", *LAYOUT_COLUMNS, *extra) for f in frames])
        .filter(key.is_in(used.implode()))
        .sort(key)
        .with_row_index("layout_id", offset=first_layout_id)
    )
    if context_view:
        grid_contexts = frames[0].model_frame.select("model_idx", pl.col("contexts").alias("grid_contexts"))
        layouts = layouts.join(grid_contexts, on="model_idx", how="left", maintain_order="left")
        extra.append("grid_contexts")
    return layouts.select(pl.col("layout_id").cast(_ID), *LAYOUT_COLUMNS, *extra).collect()


def _view_tables(reg: _Registry) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The pool shapes and engine settings of the build so far, as a context view keeps them."""
    with reg.lock:
        shapes, windows = _shape_frame(reg)
    pool_shapes = shapes.select(
        pl.col("_shape").cast(_ID).alias("shape_id"), *VIEW_SHAPE_COLUMNS, *pool_window_columns(windows)
    ).collect()
    if reg.view_settings is None:  # the settings are all known once the registry is built: every chunk shares them
        _, served = served_frames(reg)
        settings = served.select(pl.col("settings_id").cast(_ID), *VIEW_SETTINGS_COLUMNS).unique("settings_id")
        reg.view_settings = settings.sort("settings_id").collect()
    return pool_shapes, reg.view_settings
