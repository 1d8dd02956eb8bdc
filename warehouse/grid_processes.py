"""The capacity grid's tables built by two processes for publishing.

At fleet scale most of a build's CPU time is the per-layout planning in Python, which holds the GIL: one
process cannot spread it over two cores. A second interpreter (`python -m` this module, so it starts its own
Polars and DuckDB thread pools) builds some of the fleet's chunks from this process's registry (the engine
settings and model plans, `GridBuild.registry`), while this process builds the others in a thread of its own.
The second process hands each chunk over as Arrow IPC files in a folder of this process's, and only their names
through the pipe.
The chunks are dealt in id order to whichever process is free to plan one (`_Dealer`), so that the two end together
whatever else each holds; the caller can publish each chunk as soon as the ones before it are in: a chunk's ids
follow the chunks before it, whichever process built them. The caller gets the chunks of `iter_grid_tables` over the
same cut, in id order: the same tables, the same rows, the pool shapes numbered in another order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import math
import os
import pickle
import queue
import subprocess
import sys
import tempfile
import threading
import traceback
import typing
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from capacity.grid import GridBuild, GridModel, GridOptions, GridTables, iter_grid_tables
from capacity.spec import GpuSku

# how much lower than the caller's the build's threads run (Linux, where a priority is a thread's): the caller inserts
# the chunks in id order as they come, and its inserts, given the cores first, keep up with the build instead of being
# left for the end (what is left to insert once the last chunk is built, 0.68 -> 0.42 s on the benchmark's fleet)
BUILD_NICENESS = 10

_Range = tuple[int, Sequence[GridModel]]  # the fleet index of a chunk's first model, its models


class GridProcessError(RuntimeError):
    """The second process failed; the message is its traceback's last line."""


def iter_grid_tables_parallel(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None, *, processes: int = 2,
    chunk_models: int = 192, context_view: bool = False, concurrencies: Sequence[int] | None = None,
) -> Iterator[GridTables]:
    """`iter_grid_tables(models, gpus, options, ...)` over chunks of about `chunk_models` models, built by this process
    and a second one (`processes=2`; 1, or a fleet of one chunk, builds in this process alone). The chunks come in id
    order, each as soon as it and the ones before it are collected. Every chunk of a context view carries the pool
    shapes met so far; the last one all of them."""
    ranges = _ranges(models, chunk_models)
    # the child's pipe is passed as a file descriptor (`pass_fds`): POSIX only; elsewhere one process builds
    if processes < 2 or os.name != "posix" or len(ranges) < 2:
        yield from iter_grid_tables(
            models, gpus, options, concurrencies=concurrencies, chunk_models=chunk_models, context_view=context_view
        )
        return
    with tempfile.TemporaryDirectory(prefix="capplan-grid-") as folder:
        yield from _built_by_two(models, gpus, options, ranges, concurrencies, context_view, Path(folder))


def _built_by_two(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None, ranges: list[_Range],
    concurrencies: Sequence[int] | None, context_view: bool, folder: Path,
) -> Iterator[GridTables]:
    """The chunks of `ranges`, each built by whichever process asks for it first; the second process writes its
    chunks into `folder`."""
    read_fd, write_fd = os.pipe()
    try:
        # `python -m` this module: the caller's __main__ is not imported again (a script without a main guard would
        # start a build of its own), and the child gets its own Polars and DuckDB thread pools (a fork would not)
        worker = subprocess.Popen(
            [sys.executable, "-m", __name__, str(write_fd)], stdin=subprocess.PIPE, pass_fds=(write_fd,), env=_child_env()
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    receiver = Connection(read_fd, writable=False)
    arrived = _Arrivals()
    dealer = _Dealer(ranges)
    requests: queue.Queue[bytes | None] = queue.Queue()

    def deal_to_the_second() -> None:
        requests.put(pickle.dumps(dealer.deal(second=True)))  # None once every chunk is dealt: it stops asking

    reader = threading.Thread(
        target=_read, args=(receiver, arrived, folder, deal_to_the_second), name="capplan-grid-read", daemon=True
    )
    feeder = threading.Thread(target=_feed, args=(worker, requests), name="capplan-grid-feed", daemon=True)
    planner: threading.Thread | None = None
    try:
        reader.start()
        feeder.start()
        # the child reads what it builds with once its imports are done, then this process's registry, which plans
        # this process's chunks too; then asks for a chunk whenever it is free to plan one
        requests.put(pickle.dumps((gpus, options, concurrencies, context_view, str(folder))))
        build = GridBuild(models, gpus, options, concurrencies=concurrencies, context_view=context_view)
        requests.put(pickle.dumps(build.registry()))
        planner = threading.Thread(target=_plan, args=(build, dealer, arrived), name="capplan-grid-plan", daemon=True)
        planner.start()
        layouts = deployments = 0
        for i in range(len(ranges)):
            chunk, shapes = arrived.take(i)
            if shapes is not None:  # the second process's: its pool shapes renumbered into this build's
                chunk = chunk.with_shape_ids(build.adopt_shapes(shapes))
            chunk = chunk.shifted(layouts, deployments)
            layouts += chunk.layouts.height
            deployments += chunk.deployments.height
            yield chunk.with_view_tables(*build.view_tables()) if chunk.context_view else chunk
    finally:
        dealer.close()  # this process's planner stops after the chunk at hand, the second process at its next ask
        requests.put(None)  # the feeder stops at the first None, whatever was sent before
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        for thread in (planner, reader, feeder):
            if thread is not None and thread.is_alive():
                thread.join()
        receiver.close()


def _ranges(models: Sequence[GridModel], chunk_models: int) -> list[_Range]:
    """The fleet cut for two processes: one chunk where `chunk_models` holds it, else an even count of chunks, a pair
    more than chunks of `chunk_models` would be, the first two and the last two half the others. The caller, which
    inserts the chunks in id order, starts on a small chunk, and what it has left to insert once both processes are
    done is two small chunks."""
    count = math.ceil(len(models) / max(1, chunk_models))
    if count <= 1:
        return [(0, models)]
    chunks = 2 * (math.ceil(count / 2) + 1)
    edges = list(itertools.accumulate([1, 1, *[2] * (chunks - 4), 1, 1], initial=0))
    cuts = [round(edge * len(models) / edges[-1]) for edge in edges]
    return [(begin, models[begin:end]) for begin, end in itertools.pairwise(cuts) if end > begin]


class _Dealer:
    """The fleet's chunks, dealt in id order to whichever process asks first: each process asks when it is free to
    plan one, so that both end together whatever else each holds (this one: the registry, the second process's chunks
    read back and the caller's inserts; the second: its interpreter and imports). A fixed half each left one of them
    planning alone for 0.3-0.6 s. Chunk 1 waits for the second process's first ask: it starts later, and without
    one of its own this process could take every chunk of a small fleet before it asks."""

    def __init__(self, ranges: Sequence[_Range]) -> None:
        self._ranges = ranges
        self._left = list(range(len(ranges)))
        self._reserved: int | None = 1 if len(ranges) > 1 else None
        self._lock = threading.Lock()
        self.numbers = {begin: number for number, (begin, _) in enumerate(ranges)}

    def deal(self, second: bool = False) -> tuple[int, int, Sequence[GridModel]] | None:
        """The next chunk for this process's planner or for the `second` process (its number, its first model's fleet
        index, its models); None once all are dealt."""
        with self._lock:
            if second and self._reserved is not None:
                number, self._reserved = self._reserved, None
            else:
                number = next((i for i in self._left if i != self._reserved), -1)
                if number < 0:
                    return None
            self._left.remove(number)
        return number, *self._ranges[number]

    def close(self) -> None:
        """Deal no more (the consumer went away)."""
        with self._lock:
            self._left.clear()
            self._reserved = None

    def mine(self) -> Iterator[_Range]:
        """The chunks this process's planner is dealt, as it asks for them."""
        while (dealt := self.deal()) is not None:
            yield dealt[1], dealt[2]


class _Arrivals:
    """The collected chunks by number, from this process's planner and the second process's pipe, taken in order."""

    def __init__(self) -> None:
        self._ready: dict[int, tuple[GridTables, Any]] = {}
        self._failure: BaseException | None = None
        self._changed = threading.Condition()

    def put(self, index: int, chunk: GridTables, shapes: Any) -> None:
        with self._changed:
            self._ready[index] = (chunk, shapes)
            self._changed.notify_all()

    def fail(self, failure: BaseException) -> None:
        with self._changed:
            self._failure = self._failure or failure
            self._changed.notify_all()

    def take(self, index: int) -> tuple[GridTables, Any]:
        """Chunk `index` and the second process's pool shapes (None: this process's), once it is in."""
        with self._changed:
            self._changed.wait_for(lambda: index in self._ready or self._failure is not None)
            if index in self._ready:
                return self._ready.pop(index)
            assert self._failure is not None
            raise self._failure


def _plan(build: GridBuild, dealer: _Dealer, arrived: _Arrivals) -> None:
    """This process's chunks, as it is dealt them, each handed over as soon as it is collected; stops after the chunk
    at hand once the dealer is closed (the consumer went away)."""
    _lower_priority(threading.get_native_id())  # the collecting thread this one starts takes its priority
    chunks = build.chunks_of(
        dealer.mine(), collected=lambda begin, chunk: arrived.put(dealer.numbers[begin], chunk, None)
    )
    try:
        for _ in chunks:
            pass
    except BaseException as error:  # raised to the consumer by `take`
        arrived.fail(error)
    finally:
        chunks.close()


def _lower_priority(thread_id: int, niceness: int = BUILD_NICENESS) -> None:
    """Thread `thread_id` of this process (`threading.get_native_id`) `niceness` lower, on Linux; elsewhere (where a
    priority is the process's) nothing. A thread may always lower its priority, and may not raise it back."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):  # the thread has ended
        os.setpriority(os.PRIO_PROCESS, thread_id, min(19, os.getpriority(os.PRIO_PROCESS, thread_id) + niceness))


def _thread_ids() -> list[int]:
    """This process's threads (Linux), none elsewhere."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return []


def _child_env() -> dict[str, str]:
    """The child's environment: this process's import path, and Polars' threads shared between the two processes
    (on two cores, two processes of two threads each spent more CPU time waiting on each other than they saved)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    env.setdefault("POLARS_MAX_THREADS", str(max(1, cores // 2)))
    return env


def _feed(worker: subprocess.Popen[bytes], requests: queue.Queue[bytes | None]) -> None:
    """Writes each request into the child's stdin, then closes it."""
    assert worker.stdin is not None
    try:
        while (request := requests.get()) is not None:
            worker.stdin.write(request)
            worker.stdin.flush()
        worker.stdin.close()
    except OSError:  # the child is gone: the receiver says so
        pass


def _read(receiver: Connection, arrived: _Arrivals, folder: Path, deal: Callable[[], None]) -> None:
    """Every message of the second process as it arrives, until its last ("done" or "error"), or an error if it
    stops first: a chunk, whose tables are read from `folder`, or an ask for the next chunk (`deal`)."""
    try:
        while True:
            kind, index, payload, shapes = receiver.recv()
            if kind == "next":
                deal()
                continue
            if kind == "chunk":
                arrived.put(index, _unpacked(payload, folder, index), shapes)
                continue
            if kind == "error":
                arrived.fail(GridProcessError(f"the grid's second process failed: {payload}"))
            return
    except (EOFError, OSError):
        arrived.fail(GridProcessError("the grid's second process failed: it stopped without a word"))
    except BaseException as error:  # a message this process cannot read: the consumer hears it rather than waits
        arrived.fail(GridProcessError(f"the grid's second process sent what this process cannot read: {error!r}"))


# a chunk as the pipe carries it: the names of its tables written into the folder, and its other fields
_Packed = tuple[list[str], dict[str, Any]]
_TABLE_FIELDS = frozenset(
    name for name, hint in typing.get_type_hints(GridTables).items() if pl.DataFrame in (hint, *typing.get_args(hint))
)


def _table_path(folder: Path, index: int, name: str) -> Path:
    return folder / f"chunk-{index}-{name}.arrow"


def _packed(chunk: GridTables, folder: Path, index: int) -> _Packed:
    """Chunk `index` as it crosses to the first process: its tables written into `folder` as Arrow IPC files, which
    the first process reads in one call each. Through the pipe, a chunk's tens of MiB were read 64 KiB at a time, the
    reader thread taking the GIL back from the planning for each, and the second process waited on every write."""
    tables: list[str] = []
    rest: dict[str, Any] = {}
    for field in dataclasses.fields(chunk):
        value = getattr(chunk, field.name)
        if isinstance(value, pl.DataFrame):
            value.write_ipc(_table_path(folder, index, field.name), compression="uncompressed")
            tables.append(field.name)
        else:
            rest[field.name] = value
    return tables, rest


def _unpacked(packed: _Packed, folder: Path, index: int) -> GridTables:
    """`_packed`'s chunk, its tables read back and their files removed."""
    names, rest = packed
    fields: dict[str, Any] = {}
    for name in names:
        if name not in _TABLE_FIELDS:
            raise ValueError(f"not a table of the grid: {name!r}")
        path = _table_path(folder, index, name)
        fields[name] = pl.read_ipc(path)
        path.unlink()
    return GridTables(**fields, **rest)


def _build_part(sender: Connection, requests: BinaryIO) -> None:
    """The second process: what it builds with, the fleet's registry, then each chunk it is dealt (its number, its
    first model's fleet index and its models) when it asks, each sent as soon as it is collected with the pool shapes
    met so far."""
    # a short-lived process of acyclic rows: the cyclic collector would only walk them
    gc.freeze()
    gc.disable()
    lock = threading.Lock()  # the asks (this thread) and the chunks (the collecting thread) share the pipe

    def say(message: tuple[str, int, Any, Any]) -> None:
        with lock:
            sender.send(message)

    last: tuple[str, int, Any, Any]
    try:
        gpus, options, concurrencies, context_view, folder = pickle.load(requests)
        registry = pickle.load(requests)
        build = GridBuild((), gpus, options, concurrencies=concurrencies, context_view=context_view, registry=registry)
        numbers: dict[int, int] = {}

        def dealt() -> Iterator[_Range]:
            while True:
                say(("next", 0, None, None))
                part = pickle.load(requests)
                if part is None:
                    return
                number, begin, models = part
                numbers[begin] = number
                yield begin, models

        def send(begin: int, chunk: GridTables) -> None:
            # a context view's shapes and settings are this process's: the receiver attaches its own
            number = numbers[begin]
            say(("chunk", number, _packed(chunk.with_view_tables(None, None), Path(folder), number), build.shapes()))

        for _ in build.chunks_of(dealt(), collected=send):
            pass
        last = ("done", 0, None, None)
    except BaseException as error:
        lines = traceback.format_exception_only(type(error), error)
        last = ("error", 0, lines[-1].strip() if lines else type(error).__name__, None)
    try:
        say(last)
    finally:
        sender.close()


if __name__ == "__main__":
    for thread_id in _thread_ids():  # the threads the imports started; those started later take their priority
        _lower_priority(thread_id)
    _build_part(Connection(int(sys.argv[1]), readable=False), sys.stdin.buffer)
