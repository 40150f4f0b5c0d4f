"""The table of API handlers: which API keys and versions this broker implements.

ApiVersions is built from this table and nothing else, so what is advertised is exactly what is
registered. A handler is an async function ``(context, request) -> response | None`` (None only for
produce with acks=0, which gets no response).

``HANDLERS`` is what every broker serves; ``CLUSTER_HANDLERS`` adds what only a broker of a
cluster serves (the controller's commands, AlterPartition, ControlledShutdown, ElectLeaders,
OffsetForLeaderEpoch): a single node neither serves nor advertises them (``handler_table``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.broker.context import RequestContext

HandlerFunction = Callable[["RequestContext", Any], Awaitable[Any | None]]


@dataclass(frozen=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    request_type: type
    response_type: type
    handle: HandlerFunction


HANDLERS: dict[int, Handler] = {}
CLUSTER_HANDLERS: dict[int, Handler] = {}


def handler_table(cluster: bool) -> dict[int, Handler]:
    """The APIs a broker serves (and advertises): a single node's, or a cluster broker's."""
    return {**HANDLERS, **CLUSTER_HANDLERS} if cluster else HANDLERS


def handles(
    request_type: type, response_type: type, min_version: int, max_version: int, *, cluster_only: bool = False
) -> Callable[[HandlerFunction], HandlerFunction]:
    """Register ``function`` as the handler of ``request_type`` for versions min..max inclusive
    (``cluster_only``: served only by a broker of a cluster)."""
    api_key = request_type.API_KEY  # type: ignore[attr-defined]
    assert request_type.MIN_VERSION <= min_version <= max_version <= request_type.MAX_VERSION, (  # type: ignore[attr-defined]
        f"{request_type.__name__}: versions {min_version}-{max_version} outside the specification"
    )

    table = CLUSTER_HANDLERS if cluster_only else HANDLERS

    def register(function: HandlerFunction) -> HandlerFunction:
        assert api_key not in HANDLERS and api_key not in CLUSTER_HANDLERS, (
            f"two handlers for api key {api_key}"
        )
        table[api_key] = Handler(
            api_key=api_key,
            name=request_type.__name__.removesuffix("Request"),
            min_version=min_version,
            max_version=max_version,
            request_type=request_type,
            response_type=response_type,
            handle=function,
        )
        return function

    return register
