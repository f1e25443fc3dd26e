"""zabref.runtime.tenure: the survivors of a full collection are not walked again; cycles are collected as before
unless they reach a tenured object, until `release`. That a server process tenures (its ``ping``):
tests/test_control.py."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from zabref.runtime.tenure import Tenuring


class _Obj:
    def __init__(self) -> None:
        self.other: object = None


@pytest.fixture
def tenuring() -> Iterator[Tenuring]:
    t = Tenuring()
    t.install()
    try:
        yield t
    finally:
        t.remove()
        gc.unfreeze()


def _walked() -> set[int]:
    """The ids of every object a collection would walk now (the permanent generation's are not among them)."""
    return {id(o) for o in gc.get_objects()}


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """Only the test's own gc.collect() runs: an automatic full collection while it makes its objects would tenure
    some before its first look (fresh-clone CI of f973fdc: 'Extra items in the left set')."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_the_survivors_of_a_full_collection_are_no_longer_walked(tenuring: Tenuring,
                                                                 no_automatic_collection: None) -> None:
    kept = [_Obj() for _ in range(5000)]
    before = gc.get_freeze_count()
    assert {id(o) for o in kept} <= _walked()
    gc.collect()
    assert gc.get_freeze_count() >= before + len(kept)
    assert not {id(o) for o in kept} & _walked()
    report = tenuring.report()
    assert report["tenuring"] is True and report["full_collections"] >= 1 and report["tenured"] >= len(kept)
    # what is made later is walked until the next full collection, then tenured too
    later = [_Obj() for _ in range(100)]
    assert {id(o) for o in later} <= _walked()
    gc.collect()
    assert not {id(o) for o in later} & _walked()


def test_young_cycles_are_collected_and_tenured_objects_are_freed_by_their_counts(tenuring: Tenuring) -> None:
    tenured = _Obj()
    gc.collect()
    gone = weakref.ref(tenured)
    del tenured  # no cycle: freed at once although tenured
    assert gone() is None
    a, b = _Obj(), _Obj()
    a.other, b.other = b, a
    cycle = weakref.ref(a)
    del a, b  # a young cycle: a young collection takes it
    gc.collect(0)
    assert cycle() is None


def test_a_cycle_that_reaches_a_tenured_object_waits_for_release(tenuring: Tenuring) -> None:
    a, b = _Obj(), _Obj()
    a.other, b.other = b, a
    gc.collect()  # tenured while alive
    cycle = weakref.ref(a)
    del a, b
    gc.collect()
    assert cycle() is not None  # the cost this module's docstring names
    tenuring.release()
    assert cycle() is None
    assert tenuring.installed  # and what survived the release's collection is tenured again
    assert gc.get_freeze_count() > 0


def test_removed_it_tenures_nothing() -> None:
    t = Tenuring()
    t.install()
    t.install()
    assert gc.callbacks.count(t._callback) == 1
    t.remove()
    assert not t.installed
    gc.unfreeze()
    gc.collect()
    assert gc.get_freeze_count() == 0
    assert t.report() == {"tenuring": False, "tenured": 0, "full_collections": 0, "longest_collection_ms": 0.0}

