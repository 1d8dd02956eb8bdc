"""The capacity grid's tables built by two processes for publishing.

At fleet scale most of a build's CPU time is the per-layout planning in Python, which holds the GIL: one
process cannot spread it over two cores. A second interpreter (`python -m` this module, so it starts its own
Polars and DuckDB thread pools) builds some of the fleet's chunks from this process's registry (the engine
settings and model plans, `GridBuild.registry`), while this process builds the others in a thread of its own.
The second process hands each chunk over as Arrow IPC files in a folder of this process's, and only their names
through the pipe.
The chunks alternate between the two (this process the first, the second process the next, ...), so that the
caller can publish each as soon as the ones before it are in: a chunk's ids follow the chunks before it, whichever
process built them. The caller gets the chunks of `iter_grid_tables` over the same cut, in id order: the same
tables, the same rows, the pool shapes numbered in another order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
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
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, BinaryIO

import polars as pl

from capacity.grid import GridBuild, GridModel, GridOptions, GridTables, iter_grid_tables
from capacity.spec import GpuSku

# the part of the fleet's models the second process builds: it starts later (an interpreter and its imports) and this
# process also builds the registry, reads the second process's chunks and does whatever the caller does with every chunk
SECOND_PROCESS_SHARE = 0.5

# how much lower than the caller's the build's threads run (Linux, where a priority is a thread's): the caller inserts
# the chunks in id order as they come, and its inserts, given the cores first, keep up with the build instead of being
# left for the end (what is left to insert once the last chunk is built, 0.68 -> 0.42 s on the benchmark's fleet)
BUILD_NICENESS = 10

_Range = tuple[int, Sequence[GridModel]]  # the fleet index of a chunk's first model, its models


class GridProcessError(RuntimeError):
    """The second process failed; the message is its traceback's last line."""


def iter_grid_tables_parallel(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None, *, processes: int = 2,
    share: float = SECOND_PROCESS_SHARE, chunk_models: int = 192, context_view: bool = False,
    concurrencies: Sequence[int] | None = None,
) -> Iterator[GridTables]:
    """`iter_grid_tables(models, gpus, options, ...)` over chunks of about `chunk_models` models, `share` of the models
    built by a second process (`processes=2`; 1, or a fleet of one chunk, builds in this process alone). The chunks
    come in id order, each as soon as it and the ones before it are collected. Every chunk of a context view carries
    the pool shapes met so far; the last one all of them."""
    ranges, theirs = _ranges(models, chunk_models, share if processes >= 2 else 0.0)
    # the child's pipe is passed as a file descriptor (`pass_fds`): POSIX only; elsewhere one process builds
    if processes < 2 or os.name != "posix" or not theirs or len(theirs) == len(ranges):
        yield from iter_grid_tables(
            models, gpus, options, concurrencies=concurrencies, chunk_models=chunk_models, context_view=context_view
        )
        return
    with tempfile.TemporaryDirectory(prefix="capplan-grid-") as folder:
        yield from _built_by_two(models, gpus, options, ranges, theirs, concurrencies, context_view, Path(folder))


def _built_by_two(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None, ranges: list[_Range],
    theirs: set[int], concurrencies: Sequence[int] | None, context_view: bool, folder: Path,
) -> Iterator[GridTables]:
    """The chunks of `ranges`, those numbered `theirs` built by a second process that writes them into `folder`."""
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
    reader = threading.Thread(target=_read, args=(receiver, arrived, folder), name="capplan-grid-read", daemon=True)
    requests: queue.Queue[bytes | None] = queue.Queue()
    feeder = threading.Thread(target=_feed, args=(worker, requests), name="capplan-grid-feed", daemon=True)
    stop = threading.Event()
    planner: threading.Thread | None = None
    try:
        reader.start()
        feeder.start()
        # the child reads its chunks' models once its imports are done, then this process's registry, which plans
        # the others too: both written by the feeder thread while this process goes on
        parts = [(i, *ranges[i]) for i in sorted(theirs)]
        requests.put(pickle.dumps((parts, gpus, options, concurrencies, context_view, str(folder))))
        build = GridBuild(models, gpus, options, concurrencies=concurrencies, context_view=context_view)
        requests.put(pickle.dumps(build.registry()))
        requests.put(None)
        index = {begin: i for i, (begin, _) in enumerate(ranges)}
        mine = [r for i, r in enumerate(ranges) if i not in theirs]
        planner = threading.Thread(
            target=_plan, args=(build, mine, index, arrived, stop), name="capplan-grid-plan", daemon=True
        )
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
        stop.set()
        requests.put(None)  # the feeder stops at the first None, whatever was sent before
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        for thread in (planner, reader, feeder):
            if thread is not None and thread.is_alive():
                thread.join()
        receiver.close()


def _ranges(models: Sequence[GridModel], chunk_models: int, share: float) -> tuple[list[_Range], set[int]]:
    """The fleet cut into chunks, and the numbers of those the second process builds. With a `share` between 0 and 1
    the chunks go in pairs, this process's first, a pair's second chunk holding `share` of its models; there is one
    pair more than chunks of `chunk_models` ask for, and the first and the last pair are half the others: the
    caller, which inserts the chunks in id order, starts on a small chunk, and what it has left to insert once both
    processes are done is two small chunks. Else (one process) chunks of at most `chunk_models`, none the second's."""
    count = max(1, math.ceil(len(models) / max(1, chunk_models)))
    if not 0 < share < 1 or count == 1:
        size = max(1, math.ceil(len(models) / count))
        return [(begin, models[begin : begin + size]) for begin in range(0, len(models), size)], set()
    pairs = math.ceil(count / 2) + 1
    edges = [0.0, *(min(max(p - 0.5, 0.0), pairs - 1.0) for p in range(1, pairs + 1))]
    ranges: list[_Range] = []
    theirs: set[int] = set()
    for pair in range(pairs):
        begin, end = (round(edges[p] * len(models) / edges[-1]) for p in (pair, pair + 1))
        cut = min(end, begin + max(1, round((end - begin) * (1 - share))))
        for first, last, second in ((begin, cut, False), (cut, end, True)):
            if last > first:  # a pair of one model: one chunk
                if second:
                    theirs.add(len(ranges))
                ranges.append((first, models[first:last]))
    return ranges, theirs


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


def _plan(
    build: GridBuild, ranges: Sequence[_Range], index: dict[int, int], arrived: _Arrivals, stop: threading.Event
) -> None:
    """This process's chunks, each handed over as soon as it is collected; stops after the chunk at hand once
    `stop` is set (the consumer went away)."""
    _lower_priority(threading.get_native_id())  # the collecting thread this one starts takes its priority
    chunks = build.chunks_of(ranges, collected=lambda begin, chunk: arrived.put(index[begin], chunk, None))
    try:
        for _ in chunks:
            if stop.is_set():
                break
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


def _read(receiver: Connection, arrived: _Arrivals, folder: Path) -> None:
    """Every message of the second process as it arrives, until its last ("done" or "error"), or an error if it
    stops first; a chunk's tables are read from `folder`."""
    try:
        while True:
            kind, index, payload, shapes = receiver.recv()
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
    """The second process: the fleet's chunks it is sent (each its number, its first model's fleet index and its
    models), one after the other, each sent as soon as it is collected with the pool shapes met so far."""
    # a short-lived process of acyclic rows: the cyclic collector would only walk them
    gc.freeze()
    gc.disable()
    message: tuple[str, int, Any, Any]
    try:
        parts, gpus, options, concurrencies, context_view, folder = pickle.load(requests)
        registry = pickle.load(requests)
        build = GridBuild((), gpus, options, concurrencies=concurrencies, context_view=context_view, registry=registry)
        numbers = {begin: number for number, begin, _ in parts}

        def send(begin: int, chunk: GridTables) -> None:
            # a context view's shapes and settings are this process's: the receiver attaches its own
            number = numbers[begin]
            packed = _packed(chunk.with_view_tables(None, None), Path(folder), number)
            sender.send(("chunk", number, packed, build.shapes()))

        for _ in build.chunks_of([(begin, models) for _, begin, models in parts], collected=send):
            pass
        message = ("done", 0, None, None)
    except BaseException as error:
        lines = traceback.format_exception_only(type(error), error)
        message = ("error", 0, lines[-1].strip() if lines else type(error).__name__, None)
    try:
        sender.send(message)
    finally:
        sender.close()


if __name__ == "__main__":
    for thread_id in _thread_ids():  # the threads the imports started; those started later take their priority
        _lower_priority(thread_id)
    _build_part(Connection(int(sys.argv[1]), readable=False), sys.stdin.buffer)
