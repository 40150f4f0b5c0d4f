"""The built-in server-side assignors by the name members ask for (``group.remote.assignor``) and the
broker offers (``group.consumer.assignors``)."""

from __future__ import annotations

from strom.assignors.server.base import ServerAssignor
from strom.assignors.server.range_assignor import RangeAssignor
from strom.assignors.server.uniform import UniformAssignor

SERVER_ASSIGNORS: dict[str, type[ServerAssignor]] = {
    assignor.name: assignor for assignor in (UniformAssignor, RangeAssignor)
}

# Kafka 4's default: the first of group.consumer.assignors ("uniform,range").
DEFAULT_SERVER_ASSIGNOR = UniformAssignor.name


def get_server_assignor(name: str) -> ServerAssignor:
    """A fresh instance of the built-in server-side assignor called ``name``; KeyError naming the
    known ones otherwise."""
    try:
        assignor_class = SERVER_ASSIGNORS[name]
    except KeyError:
        raise KeyError(
            f"no server-side assignor named {name!r}; built-in: {', '.join(sorted(SERVER_ASSIGNORS))}"
        ) from None
    return assignor_class()


def register_server_assignor(assignor_class: type[ServerAssignor]) -> None:
    """Adds a custom assignor under its ``name``, for the broker to offer (``group.consumer.assignors``)
    and members to ask for (``group.remote.assignor``). Register before the broker reads its
    configuration. ValueError if the name is empty or already taken."""
    name = getattr(assignor_class, "name", "")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{assignor_class.__name__} has no name (set the class attribute `name`)")
    if name in SERVER_ASSIGNORS:
        raise ValueError(f"a server-side assignor named {name!r} is already registered")
    SERVER_ASSIGNORS[name] = assignor_class
