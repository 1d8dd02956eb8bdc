"""`capacity.collector.paused`: the cyclic collector off while a grid build runs, and back as it was after,
whatever the nesting, the threads, or a build abandoned half way."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from benchmarks.estimate import catalog_gpus, catalog_models
from capacity.collector import paused
from capacity.grid import iter_grid_tables


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_nested_pauses_switch_it_back_on_once_the_last_is_out(collector_on: None) -> None:
    with paused():
        assert not gc.isenabled()
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the outer pause still holds it"
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on: None) -> None:
    gc.disable()
    with paused():
        pass
    assert not gc.isenabled()


def test_two_threads_that_leave_in_the_other_order_leave_it_on(collector_on: None) -> None:
    first_in, second_in, first_may_leave = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with paused():
            first_in.set()
            first_may_leave.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert first_in.wait(10)
    with paused():  # came in while the collector was already off: must not remember "off"
        second_in.set()
        first_may_leave.set()
        thread.join(10)
        assert not gc.isenabled(), "this pause still holds it"
    assert gc.isenabled()


def test_a_grid_build_leaves_the_collector_as_it_found_it_even_when_abandoned(collector_on: None) -> None:
    models, _ = catalog_models()
    gpus = catalog_gpus()[:3]
    chunks = iter_grid_tables(models[:6], gpus, chunk_models=2)
    next(chunks)
    assert not gc.isenabled(), "paused while the build is under way"
    chunks.close()
    assert gc.isenabled()
    assert sum(chunk.deployments.height for chunk in iter_grid_tables(models[:6], gpus, chunk_models=2)) > 0
    assert gc.isenabled()
