"""The capacity grid's tables built by two processes for publishing.

At fleet scale most of a build's CPU time is the per-layout planning in Python, which holds the GIL: one
process cannot spread it over two cores. A second interpreter (`python -m` this module, so it starts its own
Polars and DuckDB thread pools) builds some of the fleet's chunks from this process's registry (the engine
settings and model plans, `GridBuild.registry`), while this process builds the others in a thread of its own.
The chunks alternate between the two (this process the first, the second process the next, ...), so that the
caller can publish each as soon as the ones before it are in: a chunk's ids follow the chunks before it, whichever
process built them. The caller gets the chunks of `iter_grid_tables` over the same cut, in id order: the same
tables, the same rows, the pool shapes numbered in another order.
"""

from __future__ import annotations

import dataclasses
import gc
import io
import math
import os
import pickle
import queue
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any, BinaryIO

import polars as pl

from capacity.grid import GridBuild, GridModel, GridOptions, GridTables, iter_grid_tables
from capacity.spec import GpuSku

# the part of the fleet's chunks the second process builds: it starts later (an interpreter, its imports and its
# registry) and this process also unpickles its chunks and does whatever the caller does with every chunk
SECOND_PROCESS_SHARE = 0.5

_Range = tuple[int, Sequence[GridModel]]  # the fleet index of a chunk's first model, its models


class GridProcessError(RuntimeError):
    """The second process failed; the message is its traceback's last line."""


def iter_grid_tables_parallel(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None, *, processes: int = 2,
    share: float = SECOND_PROCESS_SHARE, chunk_models: int = 192, context_view: bool = False,
    concurrencies: Sequence[int] | None = None,
) -> Iterator[GridTables]:
    """`iter_grid_tables(models, gpus, options, ...)` over chunks of at most `chunk_models` models, `share` of them
    built by a second process (`processes=2`; 1, or a fleet of one chunk, builds in this process alone). The chunks
    come in id order, each as soon as it and the ones before it are collected. Every chunk of a context view carries
    the pool shapes met so far; the last one all of them."""
    ranges = _ranges(models, chunk_models, even=processes >= 2)
    theirs = _second_process_chunks(len(ranges), share)
    # the child's pipe is passed as a file descriptor (`pass_fds`): POSIX only; elsewhere one process builds
    if processes < 2 or os.name != "posix" or not theirs or len(theirs) == len(ranges):
        yield from iter_grid_tables(
            models, gpus, options, concurrencies=concurrencies, chunk_models=chunk_models, context_view=context_view
        )
        return
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
    reader = threading.Thread(target=_read, args=(receiver, arrived), name="capplan-grid-read", daemon=True)
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
        requests.put(pickle.dumps((parts, gpus, options, concurrencies, context_view)))
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


def _ranges(models: Sequence[GridModel], chunk_models: int, even: bool) -> list[_Range]:
    """The fleet cut into as few chunks of at most `chunk_models` models as it takes, of even sizes (a small last
    chunk costs a chunk's fixed work for few rows); an even count of them where two processes share them."""
    count = max(1, math.ceil(len(models) / max(1, chunk_models)))
    if even and count > 1 and count % 2:
        count += 1
    size = max(1, math.ceil(len(models) / count))
    return [(begin, models[begin : begin + size]) for begin in range(0, len(models), size)]


def _second_process_chunks(count: int, share: float) -> set[int]:
    """The chunks the second process builds: `share` of them, spread over the fleet (every other one at a half)."""
    return {i for i in range(count) if math.floor((i + 1) * share) > math.floor(i * share)}


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
    chunks = build.chunks_of(ranges, collected=lambda begin, chunk: arrived.put(index[begin], chunk, None))
    try:
        for _ in chunks:
            if stop.is_set():
                break
    except BaseException as error:  # raised to the consumer by `take`
        arrived.fail(error)
    finally:
        chunks.close()


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


def _read(receiver: Connection, arrived: _Arrivals) -> None:
    """Every message of the second process as it arrives (its writes wait on the pipe until they are read), until
    its last ("done" or "error"), or an error if it stops first."""
    try:
        while True:
            kind, index, payload, shapes = receiver.recv()
            if kind == "chunk":
                arrived.put(index, _unpacked(payload), shapes)
                continue
            if kind == "error":
                arrived.fail(GridProcessError(f"the grid's second process failed: {payload}"))
            return
    except (EOFError, OSError):
        arrived.fail(GridProcessError("the grid's second process failed: it stopped without a word"))
    except BaseException as error:  # a message this process cannot read: the consumer hears it rather than waits
        arrived.fail(GridProcessError(f"the grid's second process sent what this process cannot read: {error!r}"))


_Packed = tuple[dict[str, bytes], dict[str, Any]]


def _packed(chunk: GridTables) -> _Packed:
    """A chunk as it crosses the pipe: its tables as Arrow IPC bytes (written and read back in a third of the CPU
    time Polars' pickle takes at either end, on tables of tens of MiB), and its other fields."""
    tables: dict[str, bytes] = {}
    rest: dict[str, Any] = {}
    for field in dataclasses.fields(chunk):
        value = getattr(chunk, field.name)
        if isinstance(value, pl.DataFrame):
            buffer = io.BytesIO()
            value.write_ipc(buffer, compression="uncompressed")
            tables[field.name] = buffer.getvalue()
        else:
            rest[field.name] = value
    return tables, rest


def _unpacked(packed: _Packed) -> GridTables:
    """`_packed`'s chunk, its tables read back."""
    tables, rest = packed
    fields: dict[str, Any] = {name: pl.read_ipc(io.BytesIO(data)) for name, data in tables.items()}
    return GridTables(**fields, **rest)


def _build_part(sender: Connection, requests: BinaryIO) -> None:
    """The second process: the fleet's chunks it is sent (each its number, its first model's fleet index and its
    models), one after the other, each sent as soon as it is collected with the pool shapes met so far."""
    # a short-lived process of acyclic rows: the cyclic collector would only walk them
    gc.freeze()
    gc.disable()
    message: tuple[str, int, Any, Any]
    try:
        parts, gpus, options, concurrencies, context_view = pickle.load(requests)
        registry = pickle.load(requests)
        build = GridBuild((), gpus, options, concurrencies=concurrencies, context_view=context_view, registry=registry)
        numbers = {begin: number for number, begin, _ in parts}

        def send(begin: int, chunk: GridTables) -> None:
            # a context view's shapes and settings are this process's: the receiver attaches its own
            sender.send(("chunk", numbers[begin], _packed(chunk.with_view_tables(None, None)), build.shapes()))

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
    _build_part(Connection(int(sys.argv[1]), readable=False), sys.stdin.buffer)
