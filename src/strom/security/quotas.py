"""Client quotas (seed 003 §2.9): who a quota applies to, which quota applies, rates over a window,
and how long a client over its quota is throttled. Pure: time comes in as milliseconds.

**Entities.** A quota is set on an entity: a user, a client id, or a (user, client id) pair; either
part may be the *default* (``None`` here, ``<default>`` in Kafka's ZooKeeper paths and tools), which
applies to every user (client id) that has no entity of its own at that level.

**Precedence** (§2.9.3, Kafka's documentation): for a connection of user ``u`` with client id ``c``
the first of these that sets the quota type wins, each type resolved on its own::

    /config/users/u/clients/c            /config/users/<default>/clients/c
    /config/users/u/clients/<default>    /config/users/<default>/clients/<default>
    /config/users/u                      /config/users/<default>
                                         /config/clients/c
                                         /config/clients/<default>

(left column first, top to bottom). The entity that matched also says who *shares* the quota: a
quota on ``users/u`` is shared by every client id of ``u``; one on ``users/u/clients/<default>`` or
``clients/<default>`` gives each client id its own allowance.

**Users and ANONYMOUS.** As in Kafka, the user of a connection is its principal's name: a connection
that did not authenticate is the user ``ANONYMOUS``. So ``users/ANONYMOUS`` applies to every
unauthenticated connection, and the ``users/<default>`` levels apply to them as they apply to any
user without an entity of its own.

**Measurement and throttling** (§2.9.6): each quota group's usage is measured as a rate over a
window of ``quota.window.num`` samples of ``quota.window.size.seconds`` each (Kafka's keys and
defaults, 11 of 1 s): the total of the live samples over the time since the client's first record,
at least ``num - 1`` whole samples (a new client is not judged on its first millisecond), at most
the whole window. That rate is what the metrics show.

The throttle time is how long the client must stay silent for its usage to be back within the
quota, computed over the same window as a credit (Kafka's token bucket of KIP-599): credit accrues
at the quota ``q`` per second up to ``num - 1`` samples' worth, each request spends what it is charged,
and a client in debt ``d`` is throttled for ``d / q``, capped at the whole window
(``throttle_ms_max``; the debt is bounded as the credit is). Over a window this allows what the windowed rate allows (a new or long idle
client gets a window's worth at once, then exactly the quota). The difference is what happens next:
with the throttle taken from the windowed rate (``t = w·(r - q)/q``, as Kafka's byte-rate quotas
do) a burst is let through again each time the samples of an earlier burst expire, so a client
held back after its first burst alternates, with the window as period, between bursts of ten
seconds' worth and near silence (measured: 1.2 MiB/s over 30 s against a 1 MiB/s quota); with the
credit it is held to the quota from then on.

``request_percentage`` is measured in percent of one thread's time: the caller records handler
seconds times 100 and the rate per second is then a percentage. ``controller_mutation_rate`` (Kafka's
KIP-599, which refuses over-quota topic mutations rather than delaying them) is not supported:
altering it is refused with a clear message.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from strom.base import limits

ENTITY_USER = "user"
ENTITY_CLIENT_ID = "client-id"
ENTITY_IP = "ip"  # Kafka's connection-rate entity: known, not supported here
ENTITY_TYPES = frozenset({ENTITY_USER, ENTITY_CLIENT_ID})
DEFAULT_PATH_NAME = "<default>"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# The quota types strom enforces; Kafka's producer/consumer rates are whole bytes per second.
QUOTA_TYPES = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
WHOLE_NUMBER_QUOTA_TYPES = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
UNSUPPORTED_QUOTA_TYPES = {
    CONTROLLER_MUTATION_RATE: "controller_mutation_rate (KIP-599) is not supported by strom",
}

# Kafka's broker keys and defaults for the measurement window.
WINDOW_NUM_KEY = "quota.window.num"
WINDOW_SIZE_SECONDS_KEY = "quota.window.size.seconds"
WINDOW_NUM_DEFAULT = 11
WINDOW_SIZE_SECONDS_DEFAULT = 1

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2


class QuotaError(ValueError):
    """A quota request that cannot be honoured (Kafka answers INVALID_REQUEST); the message says why."""


@dataclass(frozen=True, order=True)
class QuotaEntity:
    """Who a quota applies to: ``(entity type, name)`` pairs sorted by type; a ``None`` name is the
    default entity of that type."""

    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(cls, parts: Iterable[tuple[str, str | None]]) -> QuotaEntity:
        """Checks the parts: known entity types, each at most once, at least one."""
        listed = list(parts)
        types = [entity_type for entity_type, _ in listed]
        if not listed:
            raise QuotaError("a quota entity needs at least one entity type")
        if len(set(types)) != len(types):
            raise QuotaError(f"duplicate entity type in {types}")
        for entity_type in types:
            if entity_type == ENTITY_IP:
                raise QuotaError("quotas on the 'ip' entity type (connection rates) are not supported")
            if entity_type not in ENTITY_TYPES:
                raise QuotaError(f"unknown entity type '{entity_type}' (user, client-id)")
        return cls(tuple(sorted(listed, key=lambda part: part[0])))

    @classmethod
    def user(cls, name: str | None) -> QuotaEntity:
        return cls(((ENTITY_USER, name),))

    @classmethod
    def client(cls, name: str | None) -> QuotaEntity:
        return cls(((ENTITY_CLIENT_ID, name),))

    @classmethod
    def user_client(cls, user: str | None, client_id: str | None) -> QuotaEntity:
        return cls(((ENTITY_CLIENT_ID, client_id), (ENTITY_USER, user)))

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.parts)

    def path(self) -> str:
        """Kafka's ZooKeeper path of this entity (under /config), e.g. ``users/<default>/clients/c``."""
        names = self.as_dict()
        steps = []
        if ENTITY_USER in names:
            steps.append(f"users/{_path_name(names[ENTITY_USER])}")
        if ENTITY_CLIENT_ID in names:
            steps.append(f"clients/{_path_name(names[ENTITY_CLIENT_ID])}")
        return "/".join(steps)

    def __str__(self) -> str:
        return self.path()


def _path_name(name: str | None) -> str:
    return DEFAULT_PATH_NAME if name is None else name


def check_quota_value(key: str, value: float) -> float:
    """The value a quota key may be set to, or QuotaError (unknown key, not positive, not whole)."""
    if key in UNSUPPORTED_QUOTA_TYPES:
        raise QuotaError(UNSUPPORTED_QUOTA_TYPES[key])
    if key not in QUOTA_TYPES:
        raise QuotaError(f"unknown quota key '{key}' ({', '.join(QUOTA_TYPES)})")
    if not math.isfinite(value) or value <= 0:
        raise QuotaError(f"{key} must be a positive number, not {value}")
    if key in WHOLE_NUMBER_QUOTA_TYPES and value != int(value):
        raise QuotaError(f"{key} is a whole number of bytes per second, not {value}")
    return value


# -- matching entities against a describe filter ------------------------------------------------


class FilterComponent(NamedTuple):
    entity_type: str
    match_type: int  # MATCH_EXACT, MATCH_DEFAULT or MATCH_ANY
    match: str | None


def check_filter(components: Iterable[FilterComponent]) -> list[FilterComponent]:
    """Refuses what Kafka refuses in a DescribeClientQuotas filter."""
    listed = list(components)
    seen: set[str] = set()
    for component in listed:
        if component.entity_type in seen:
            raise QuotaError(f"duplicate filter component for entity type '{component.entity_type}'")
        seen.add(component.entity_type)
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise QuotaError(f"an exact match for '{component.entity_type}' needs a name")
        elif component.match_type in (MATCH_DEFAULT, MATCH_ANY):
            if component.match is not None:
                raise QuotaError(
                    f"a default or any match for '{component.entity_type}' takes no name, not"
                    f" '{component.match}'"
                )
        else:
            raise QuotaError(f"unknown match type {component.match_type}")
    return listed


def matches(entity: QuotaEntity, components: Iterable[FilterComponent], strict: bool) -> bool:
    """Whether ``entity`` passes the filter: every component matches a part of it; with ``strict``
    the entity has no part the filter does not name."""
    names = entity.as_dict()
    named = set()
    for component in components:
        named.add(component.entity_type)
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
        if component.match_type == MATCH_ANY and name is None:
            return False
    return not strict or set(names) <= named


# -- rates over a window ---------------------------------------------------------------------------


class QuotaWindow(NamedTuple):
    samples: int = WINDOW_NUM_DEFAULT
    sample_ms: int = WINDOW_SIZE_SECONDS_DEFAULT * 1000

    @property
    def throttle_ms_max(self) -> int:
        """The longest throttle one request earns: a whole window."""
        return self.samples * self.sample_ms


class WindowedRate:
    """A value's rate per second over the last ``window.samples`` samples of ``window.sample_ms``."""

    __slots__ = ("_first_ms", "_samples", "_total", "window")

    def __init__(self, window: QuotaWindow) -> None:
        assert window.samples >= 1 and window.sample_ms >= 1, window
        self.window = window
        self._samples: deque[list[float]] = deque()  # [start ms, total] per sample, oldest first
        self._total = 0.0
        self._first_ms: int | None = None  # the first record since the window was last empty

    def record(self, value: float, now_ms: int) -> None:
        self._expire(now_ms)
        samples = self._samples
        if not samples:
            self._first_ms = now_ms
        if not samples or now_ms >= samples[-1][0] + self.window.sample_ms:
            samples.append([float(now_ms), 0.0])
        samples[-1][1] += value
        self._total += value

    def _expire(self, now_ms: int) -> None:
        samples = self._samples
        horizon = now_ms - self.window.samples * self.window.sample_ms
        while samples and samples[0][0] <= horizon:
            self._total -= samples.popleft()[1]
        if not samples:
            self._total = 0.0  # no float residue from the subtractions
            self._first_ms = None

    def elapsed_ms(self, now_ms: int) -> float:
        """The time the rate is taken over: since the first record (a client idle for a whole
        window starts afresh), at least ``samples - 1`` whole samples, at most the whole window.
        Taking a measured client's rate over the whole window, not from its oldest live sample,
        lets its bytes leave the window one sample at a time: the rate does not drop, and the
        client is not let through in a burst, each time its oldest sample expires."""
        self._expire(now_ms)
        window_ms = self.window.samples * self.window.sample_ms
        floor_ms = max((self.window.samples - 1) * self.window.sample_ms, self.window.sample_ms)
        if self._first_ms is None:
            return float(floor_ms)
        return float(min(max(now_ms - self._first_ms, floor_ms), window_ms))

    def rate_per_s(self, now_ms: int) -> float:
        elapsed_ms = self.elapsed_ms(now_ms)
        return self._total * 1000.0 / elapsed_ms


class Credit:
    """What a client may still send before it is throttled (a token bucket): it accrues at the
    bound per second up to the bound times the window, and requests spend it."""

    __slots__ = ("_last_ms", "_tokens", "window")

    def __init__(self, window: QuotaWindow, bound_per_s: float, now_ms: int) -> None:
        self.window = window
        self._tokens = self.capacity(bound_per_s)  # a new client starts with all of it
        self._last_ms = now_ms

    def capacity(self, bound_per_s: float) -> float:
        """``num - 1`` samples' worth: what the windowed rate lets a new client send at once."""
        return bound_per_s * max(self.window.samples - 1, 1) * self.window.sample_ms / 1000.0

    def spend(self, value: float, bound_per_s: float, now_ms: int) -> int:
        """Spend ``value``; the throttle time (ms) until the credit is back at zero, 0 if not in debt."""
        elapsed_ms = max(now_ms - self._last_ms, 0)
        self._last_ms = now_ms
        capacity = self.capacity(bound_per_s)
        tokens = min(self._tokens + elapsed_ms * bound_per_s / 1000.0, capacity) - value
        # The debt is bounded too: one huge request does not hold a client back for hours.
        self._tokens = max(tokens, -capacity)
        if tokens >= 0:
            return 0
        return min(math.ceil(-tokens * 1000.0 / bound_per_s), self.window.throttle_ms_max)


# -- the manager -----------------------------------------------------------------------------------


class GroupKey(NamedTuple):
    """Who shares one allowance: Kafka's metric tags (an empty string where the quota is not per user
    or not per client id)."""

    quota_type: str
    user: str
    client_id: str


@dataclass
class QuotaGroup:
    """One allowance in use: its bound, its rate, and what it has counted (the metrics)."""

    key: GroupKey
    entity: QuotaEntity
    bound: float
    rate: WindowedRate
    credit: Credit
    total: float = 0.0
    throttle_ms_total: int = 0
    throttled_total: int = 0
    last_used_ms: int = 0


class Resolution(NamedTuple):
    entity: QuotaEntity
    key: GroupKey
    bound: float


@dataclass
class QuotaManager:
    """The configured quotas and the rates measured against them.

    ``enabled(quota_type)`` is what the broker asks first on a hot path: with no quota of that type
    configured nothing else is done.
    """

    window: QuotaWindow = field(default_factory=QuotaWindow)
    _configs: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    _enabled: set[str] = field(default_factory=set)
    _resolved: dict[tuple[str, str, str], Resolution | None] = field(default_factory=dict)
    _groups: dict[GroupKey, QuotaGroup] = field(default_factory=dict)
    _next_sweep_ms: int = 0

    # -- configuration

    def configs(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._configs.items()}

    def replace_all(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        self._configs = {entity: dict(values) for entity, values in configs.items() if values}
        self._changed()

    def set_entity(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """The entity's quotas become ``values`` (none: the entity is removed)."""
        if values:
            self._configs[entity] = dict(values)
        else:
            self._configs.pop(entity, None)
        self._changed()

    @staticmethod
    def altered(current: Mapping[str, float], ops: Iterable[tuple[str, float | None]]) -> dict[str, float]:
        """``current`` after the ops (key, value) — a None value removes the key; QuotaError on a bad op."""
        values = dict(current)
        seen: set[str] = set()
        for key, value in ops:
            if key in seen:
                raise QuotaError(f"quota key '{key}' altered twice in one entry")
            seen.add(key)
            if value is None:
                if key not in QUOTA_TYPES and key not in UNSUPPORTED_QUOTA_TYPES:
                    raise QuotaError(f"unknown quota key '{key}' ({', '.join(QUOTA_TYPES)})")
                values.pop(key, None)
            else:
                values[key] = check_quota_value(key, value)
        return values

    def _changed(self) -> None:
        self._enabled = {key for values in self._configs.values() for key in values}
        # Groups keep their rates (and metrics) across a change: the next record takes the new
        # bound; a group no longer governed by any quota is forgotten once idle (``_sweep``).
        self._resolved.clear()

    def enabled(self, quota_type: str) -> bool:
        return quota_type in self._enabled

    def any_enabled(self) -> bool:
        return bool(self._enabled)

    # -- precedence

    def resolve(self, quota_type: str, user: str, client_id: str) -> Resolution | None:
        """The entity whose quota of ``quota_type`` applies to (user, client id), or None."""
        cache_key = (quota_type, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        resolution = None
        for entity, group_user, group_client in _candidates(user, client_id):
            bound = self._configs.get(entity, {}).get(quota_type)
            if bound is not None:
                resolution = Resolution(entity, GroupKey(quota_type, group_user, group_client), bound)
                break
        if len(self._resolved) >= limits.quota_resolutions_cached_max:
            self._resolved.clear()
        self._resolved[cache_key] = resolution
        return resolution

    # -- measuring

    def record(self, quota_type: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Count ``value`` against the quota of ``quota_type`` that applies; the throttle time (ms) it
        earns, 0 when within the quota or when no quota applies."""
        resolution = self.resolve(quota_type, user, client_id)
        if resolution is None:
            return 0
        if now_ms >= self._next_sweep_ms:
            self._sweep(now_ms)
        group = self._groups.get(resolution.key)
        if group is None:
            group = QuotaGroup(
                resolution.key,
                resolution.entity,
                resolution.bound,
                WindowedRate(self.window),
                Credit(self.window, resolution.bound, now_ms),
            )
            self._groups[resolution.key] = group
        group.bound = resolution.bound
        group.entity = resolution.entity
        group.last_used_ms = now_ms
        group.total += value
        group.rate.record(value, now_ms)
        throttle_ms = group.credit.spend(value, group.bound, now_ms)
        if throttle_ms:
            group.throttle_ms_total += throttle_ms
            group.throttled_total += 1
        return throttle_ms

    def _sweep(self, now_ms: int) -> None:
        """Forget groups unused for ``quota_group_idle_ms_max`` (a client id seen once must not stay)."""
        self._next_sweep_ms = now_ms + limits.quota_group_sweep_interval_ms
        horizon = now_ms - limits.quota_group_idle_ms_max
        for key in [key for key, group in self._groups.items() if group.last_used_ms < horizon]:
            del self._groups[key]

    def groups(self) -> Iterator[QuotaGroup]:
        """The allowances in use (for metrics)."""
        return iter(list(self._groups.values()))


def _candidates(user: str, client_id: str) -> Iterator[tuple[QuotaEntity, str, str]]:
    """The eight entities of §2.9.3 in precedence order, each with who shares its allowance."""
    yield QuotaEntity.user_client(user, client_id), user, client_id
    yield QuotaEntity.user_client(user, None), user, client_id
    yield QuotaEntity.user(user), user, ""
    yield QuotaEntity.user_client(None, client_id), user, client_id
    yield QuotaEntity.user_client(None, None), user, client_id
    yield QuotaEntity.user(None), user, ""
    yield QuotaEntity.client(client_id), "", client_id
    yield QuotaEntity.client(None), "", client_id
