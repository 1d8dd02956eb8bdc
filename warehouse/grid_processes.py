"""The capacity grid's tables built by two processes for publishing.

At fleet scale half of a build's CPU time is the per-layout planning in Python, which holds the GIL: one
process cannot spread it over two cores. A second interpreter (`python -m` this module, so it starts its own
Polars and DuckDB thread pools) builds the last part of the fleet from this process's registry (the engine
settings and model plans, `GridBuild.registry`), while this process builds the first part. Its chunks come
back over a pipe as soon as each is collected, their pool shapes renumbered into this build's and their ids
placed after this process's. The caller gets the chunks of `iter_grid_tables`, in id order: the same tables,
the same rows, the pool shapes numbered in another order.
"""

from __future__ import annotations

import gc
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

from capacity.grid import GridBuild, GridModel, GridOptions, GridTables, iter_grid_tables
from capacity.spec import GpuSku

# the part of the fleet the second process builds: it starts later (an interpreter, its imports and its registry)
# and this process also unpickles its chunks and does whatever the caller does with every chunk (publishing them)
SECOND_PROCESS_SHARE = 0.5


class GridProcessError(RuntimeError):
    """The second process failed; the message is its traceback's last line."""


def iter_grid_tables_parallel(
    models: Sequence[GridModel], gpus: Sequence[GpuSku], options: GridOptions | None = None, *, processes: int = 2,
    share: float = SECOND_PROCESS_SHARE, chunk_models: int = 192, context_view: bool = False,
    concurrencies: Sequence[int] | None = None,
) -> Iterator[GridTables]:
    """`iter_grid_tables(models, gpus, options, ...)` with the last `share` of the models built by a second process
    (`processes=2`; 1, or a fleet of one chunk, builds in this process alone). Each process cuts its part into chunks
    of at most `chunk_models`. The chunks come in id order: this process's as it builds them, then the second
    process's, renumbered after them. Every chunk of a context view carries the pool shapes met so far; the last
    one all of them."""
    split = len(models) - min(len(models), max(0, round(len(models) * share)))
    # the child's pipe is passed as a file descriptor (`pass_fds`): POSIX only; elsewhere one process builds
    if processes < 2 or os.name != "posix" or split < 1 or split >= len(models) or len(models) <= chunk_models:
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
    arrived: queue.Queue[tuple[str, Any, Any]] = queue.Queue()
    reader = threading.Thread(target=_read, args=(receiver, arrived), name="capplan-grid-read", daemon=True)
    requests: queue.Queue[bytes | None] = queue.Queue()
    feeder = threading.Thread(target=_feed, args=(worker, requests), name="capplan-grid-feed", daemon=True)
    try:
        reader.start()
        feeder.start()
        # the child reads its models (split and after) once its imports are done, then this process's registry,
        # which plans the others too: both written by the feeder thread while this process goes on
        child_chunk = _per_chunk(len(models) - split, chunk_models)
        requests.put(pickle.dumps((models[split:], gpus, options, split, child_chunk, concurrencies, context_view)))
        build = GridBuild(models, gpus, options, concurrencies=concurrencies, context_view=context_view)
        requests.put(pickle.dumps(build.registry()))
        requests.put(None)
        layouts = deployments = 0
        for chunk in build.chunks(0, split, chunk_models=_per_chunk(split, chunk_models)):
            layouts += chunk.layouts.height
            deployments += chunk.deployments.height
            yield chunk
        for chunk in _received(arrived, build):
            yield _with_shapes(chunk.shifted(layouts, deployments), build)
    finally:
        requests.put(None)  # the feeder stops at the first None, whatever was sent before
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        if reader.is_alive() or feeder.is_alive():
            reader.join()
            feeder.join()
        receiver.close()


def _child_env() -> dict[str, str]:
    """The child's environment: this process's import path, and Polars' threads shared between the two processes
    (on two cores, two processes of two threads each spent more CPU time waiting on each other than they saved)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    env.setdefault("POLARS_MAX_THREADS", str(max(1, cores // 2)))
    return env


def _per_chunk(models: int, chunk_models: int) -> int:
    """Models per chunk: as few chunks as `chunk_models` allows, of even sizes (a small last chunk costs a chunk's
    fixed work for few rows)."""
    chunks = max(1, -(-models // max(1, chunk_models)))
    return -(-models // chunks)


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


def _received(arrived: queue.Queue[tuple[str, Any, Any]], build: GridBuild) -> Iterator[GridTables]:
    """The second process's chunks as `_read` queued them, their pool shapes renumbered into `build`'s."""
    while True:
        kind, payload, shapes = arrived.get()
        if kind == "error":
            raise GridProcessError(f"the grid's second process failed: {payload}")
        if kind == "done":
            return
        chunk: GridTables = payload
        yield chunk.with_shape_ids(build.adopt_shapes(shapes))


def _read(receiver: Connection, arrived: queue.Queue[tuple[str, Any, Any]]) -> None:
    """Every message of the second process as it arrives (its writes wait on the pipe until they are read), until
    its last ("done" or "error"), or an "error" if it stops first."""
    try:
        while True:
            message = receiver.recv()
            arrived.put(message)
            if message[0] != "chunk":
                return
    except (EOFError, OSError):
        arrived.put(("error", "it stopped without a word", None))


def _with_shapes(chunk: GridTables, build: GridBuild) -> GridTables:
    return chunk.with_view_tables(*build.view_tables()) if chunk.context_view else chunk


def _build_part(sender: Connection, requests: BinaryIO) -> None:
    """The second process: the fleet's models from number `start` on (those it is sent), chunk by chunk, each sent
    as soon as it is collected with the pool shapes met so far."""
    # a short-lived process of acyclic rows: the cyclic collector would only walk them
    gc.freeze()
    gc.disable()

    def send(chunk: GridTables) -> None:
        # a context view's shapes and settings are this process's: the receiver attaches its own
        sender.send(("chunk", chunk.with_view_tables(None, None), build.shapes()))

    message: tuple[str, Any, Any]
    try:
        models, gpus, options, start, chunk_models, concurrencies, context_view = pickle.load(requests)
        registry = pickle.load(requests)
        build = GridBuild(models, gpus, options, concurrencies=concurrencies, context_view=context_view,
                          registry=registry, first_model=start)
        for _ in build.chunks(start, chunk_models=chunk_models, collected=send):
            pass
        message = ("done", None, None)
    except BaseException as error:
        lines = traceback.format_exception_only(type(error), error)
        message = ("error", lines[-1].strip() if lines else type(error).__name__, None)
    try:
        sender.send(message)
    finally:
        sender.close()


if __name__ == "__main__":
    _build_part(Connection(int(sys.argv[1]), readable=False), sys.stdin.buffer)
