"""The shared request and background pools (:mod:`coordinator.parallel`)."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator import faults, parallel


def test_pmap_keeps_input_order_and_raises_only_after_every_call_ended() -> None:
    ended: list[int] = []

    def fn(x: int) -> int:
        time.sleep(0.01 * (5 - x))
        ended.append(x)
        if x == 1:
            raise ValueError("one")
        return x * 10

    with pytest.raises(ValueError, match="one"):
        parallel.pmap(fn, range(5))
    assert sorted(ended) == [0, 1, 2, 3, 4]
    assert parallel.pmap(lambda x: x * 10, range(6)) == [0, 10, 20, 30, 40, 50]


def test_background_jobs_carry_the_callers_fault_injector() -> None:
    seen: list[str] = []
    with faults.injected(seen.append):
        wait = parallel.background(lambda: faults.point("in.background"))
    wait()
    assert seen == ["in.background"]


def test_drain_waits_for_every_background_job_including_ones_they_start() -> None:
    release = threading.Event()
    done: list[str] = []

    def inner() -> None:
        time.sleep(0.05)
        done.append("inner")

    def outer() -> None:
        release.wait(5)
        parallel.background(inner)  # from a background worker: runs at once, inside this job
        done.append("outer")

    parallel.background(outer)
    assert not parallel.drain(timeout=0.05)  # still running: not idle
    release.set()
    assert parallel.drain(timeout=5)
    assert done == ["inner", "outer"]


def test_a_job_its_waiter_runs_inline_is_counted_once() -> None:
    gate = threading.Event()
    blockers = [parallel.background(lambda: gate.wait(5)) for _ in range(parallel.MAX_BACKGROUND)]
    queued = parallel.background(lambda: "ran")  # every worker is busy: the waiter runs it itself
    assert queued() == "ran"
    gate.set()
    for b in blockers:
        b()
    assert parallel.drain(timeout=5)


@pytest.mark.parametrize("busy", [False, True], ids=["in the pool", "in the waiter"])
def test_a_waiter_called_again_returns_the_same_outcome_and_the_job_runs_once(busy: bool) -> None:
    gate = threading.Event()
    blockers = [parallel.background(lambda: gate.wait(5)) for _ in range(parallel.MAX_BACKGROUND if busy else 0)]
    runs: list[int] = []

    def job() -> int:
        runs.append(1)
        raise KeyError("once")

    wait = parallel.background(job)
    for _ in range(3):
        with pytest.raises(KeyError, match="once"):
            wait()
    assert runs == [1]
    gate.set()
    for b in blockers:
        b()
    assert parallel.drain(timeout=5)
