"""The built-in assignors by their protocol name."""

from __future__ import annotations

from strom.assignors.base import Assignor
from strom.assignors.range_assignor import RangeAssignor
from strom.assignors.round_robin import RoundRobinAssignor
from strom.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

ASSIGNORS: dict[str, type[Assignor]] = {
    assignor.name: assignor
    for assignor in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def get_assignor(name: str) -> Assignor:
    """A fresh instance of the built-in assignor called `name` on the wire; KeyError naming the known
    ones otherwise."""
    try:
        assignor_class = ASSIGNORS[name]
    except KeyError:
        raise KeyError(f"no assignor named {name!r}; built-in: {', '.join(sorted(ASSIGNORS))}") from None
    return assignor_class()
