"""Loading __consumer_offsets pauses Python's cyclic garbage collector one step at a time and leaves
it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from strom.broker.groups import collector_paused


@pytest.fixture
def collector_state() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_on_again_after(collector_state: None) -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_on_again_after_an_exception(collector_state: None) -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a step failed")
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off(collector_state: None) -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
