"""Kafka's ACL model and an authorizer with its semantics (pure: no I/O).

An ACL binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED) and an
entry (principal, host, operation, ALLOW or DENY). A request by ``principal`` from ``host`` to
perform ``operation`` on a resource is decided as Kafka's authorizer decides it:

1. a principal of ``super.users`` may do anything;
2. the ACLs that apply to the resource are those whose pattern matches it: a LITERAL pattern with
   the resource's name or the wildcard name ``*``, or a PREFIXED pattern the name starts with;
3. no ACL applies to the resource at all: the answer is ``allow.everyone.if.no.acl.found``;
4. a DENY entry of the principal (or ``User:*``), the host (or ``*``) and the operation (or ALL)
   refuses, whatever else allows;
5. else an ALLOW entry of the principal, the host and the operation, ALL, or an operation that
   implies it (DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by
   ALTER_CONFIGS) allows; nothing else does.

Decisions do not scan every ACL: the bindings are indexed by (resource type, name) for literal
patterns and by (resource type, prefix) with the set of prefix lengths per type for prefixed ones,
so a decision looks up a few keys; and decisions are cached per (principal, host, operation,
resource type, name), the cache emptied on every change.

Binding filters (DescribeAcls, DeleteAcls) select bindings; a filter's pattern type MATCH selects
every binding that would apply to the named resource (literal of that name, literal ``*``, and
prefixed patterns the name starts with), ANY every pattern type, and a null name or principal or
host, or ANY operation or permission, matches every value.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from typing import NamedTuple, TypeVar

from strom.base import limits
from strom.protocol.acl import AclOperation, operations_bit_field
from strom.security.principal import KafkaPrincipal

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "binding_from_json",
    "binding_to_json",
    "invalid_binding_reason",
    "invalid_filter_reason",
    "naive_authorize",
    "parse_enum",
    "parse_super_users",
]

_E = TypeVar("_E", bound=enum.IntEnum)

# The name of the one CLUSTER resource, and the wildcards of names, principals and hosts.
CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    """Kafka's resource type codes (org.apache.kafka.common.resource.ResourceType)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """Kafka's pattern type codes; ANY and MATCH exist only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# An ALLOW of any of these operations allows the key too (besides ALL and the key itself).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}

_CONCRETE_RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}
_CONCRETE_PATTERN_TYPES = frozenset({PatternType.LITERAL, PatternType.PREFIXED})
_CONCRETE_OPERATIONS = frozenset(AclOperation) - {AclOperation.UNKNOWN, AclOperation.ANY}
_CONCRETE_PERMISSIONS = frozenset({AclPermissionType.ALLOW, AclPermissionType.DENY})


class ResourcePattern(NamedTuple):
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, patternType={self.pattern_type.name})"

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this pattern applies to the resource ``(resource_type, name)``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD_RESOURCE


class AccessControlEntry(NamedTuple):
    principal: str  # "Type:name", or "User:*"
    host: str  # an address, or "*"
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry


class AclBindingFilter(NamedTuple):
    """Selects bindings; None or ANY in a field matches every value of it."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def everything(cls) -> AclBindingFilter:
        return cls(
            ResourceType.ANY, None, PatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not pattern.matches(pattern.resource_type, self.name):
                return False
        elif self.pattern_type == PatternType.ANY:
            if self.name is not None and self.name != pattern.name:
                return False
        else:
            if self.pattern_type != pattern.pattern_type:
                return False
            if self.name is not None and self.name != pattern.name:
                return False
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == entry.permission


def _principal_reason(principal: str) -> str | None:
    try:
        KafkaPrincipal.parse(principal)
    except ValueError as error:
        return str(error)
    return None


def invalid_binding_reason(binding: AclBinding) -> str | None:
    """Why ``binding`` may not be created (INVALID_REQUEST), or None."""
    pattern, entry = binding
    if pattern.resource_type not in _CONCRETE_RESOURCE_TYPES:
        return f"resource type {pattern.resource_type.name} is not a type of resource"
    if pattern.pattern_type not in _CONCRETE_PATTERN_TYPES:
        return f"pattern type {pattern.pattern_type.name} is not LITERAL or PREFIXED"
    if entry.operation not in _CONCRETE_OPERATIONS:
        return f"operation {entry.operation.name} is not an operation"
    if entry.permission not in _CONCRETE_PERMISSIONS:
        return f"permission type {entry.permission.name} is not ALLOW or DENY"
    if not pattern.name:
        return "the resource name is empty"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}, not {pattern.name!r}"
    if pattern.pattern_type == PatternType.PREFIXED and pattern.name == WILDCARD_RESOURCE:
        return "a prefixed pattern of '*' is not allowed (a literal '*' matches every name)"
    if not entry.host:
        return "the host is empty"
    return _principal_reason(entry.principal)


def invalid_filter_reason(acl_filter: AclBindingFilter) -> str | None:
    """Why ``acl_filter`` may not be used (INVALID_REQUEST), or None."""
    if acl_filter.resource_type == ResourceType.UNKNOWN:
        return "resource type UNKNOWN"
    if acl_filter.pattern_type == PatternType.UNKNOWN:
        return "pattern type UNKNOWN"
    if acl_filter.operation == AclOperation.UNKNOWN:
        return "operation UNKNOWN"
    if acl_filter.permission == AclPermissionType.UNKNOWN:
        return "permission type UNKNOWN"
    # A filter's principal is text compared with each entry's, as Kafka matches it: one that is
    # not a principal ("*", kafka-python's own test) matches nothing, and is not refused.
    return None


def parse_enum(kind: type[_E], code: int) -> _E:
    """The member of ``kind`` with wire code ``code``; UNKNOWN (0) for a code Kafka does not have."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def binding_from_wire(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission_type: int,
) -> AclBinding:
    """A binding from the fields CreateAcls, DescribeAcls and DeleteAcls carry (wire codes)."""
    return AclBinding(
        ResourcePattern(
            parse_enum(ResourceType, resource_type), resource_name, parse_enum(PatternType, pattern_type)
        ),
        AccessControlEntry(
            principal,
            host,
            parse_enum(AclOperation, operation),
            parse_enum(AclPermissionType, permission_type),
        ),
    )


def binding_to_json(binding: AclBinding) -> dict[str, str]:
    pattern, entry = binding
    return {
        "resource_type": pattern.resource_type.name,
        "name": pattern.name,
        "pattern_type": pattern.pattern_type.name,
        "principal": entry.principal,
        "host": entry.host,
        "operation": entry.operation.name,
        "permission": entry.permission.name,
    }


def binding_from_json(value: dict[str, str]) -> AclBinding:
    """The inverse of ``binding_to_json``; raises ValueError for what it could not have written."""
    try:
        binding = AclBinding(
            ResourcePattern(
                ResourceType[value["resource_type"]], str(value["name"]), PatternType[value["pattern_type"]]
            ),
            AccessControlEntry(
                str(value["principal"]),
                str(value["host"]),
                AclOperation[value["operation"]],
                AclPermissionType[value["permission"]],
            ),
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"not an ACL binding: {value!r} ({error})") from None
    reason = invalid_binding_reason(binding)
    if reason is not None:
        raise ValueError(f"not a valid ACL binding: {value!r}: {reason}")
    return binding


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:ops``)."""
    users = set()
    for part in text.split(";"):
        part = part.strip()
        if part:
            KafkaPrincipal.parse(part)  # raises ValueError naming what is wrong
            users.add(part)
    return frozenset(users)


def _entry_allows(
    entries: Iterable[AccessControlEntry], principals: tuple[str, str], host: str, operation: AclOperation
) -> tuple[bool, bool]:
    """(a DENY entry refuses, an ALLOW entry allows) among ``entries`` for the request."""
    denied = allowed = False
    implied = IMPLIED_BY.get(operation, frozenset())
    for entry in entries:
        if entry.principal not in principals:
            continue
        if entry.host != host and entry.host != WILDCARD_HOST:
            continue
        if entry.permission == AclPermissionType.DENY:
            if entry.operation == operation or entry.operation == AclOperation.ALL:
                denied = True
        elif (
            entry.operation == operation or entry.operation == AclOperation.ALL or entry.operation in implied
        ):
            allowed = True
    return denied, allowed


def naive_authorize(
    bindings: Iterable[AclBinding],
    super_users: frozenset[str],
    allow_if_no_acl: bool,
    principal: KafkaPrincipal,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """The decision by a scan of every binding: the definition the indexed ``Authorizer`` is
    tested against (and a reader's shortest way to Kafka's rules)."""
    text = str(principal)
    if text in super_users:
        return True
    applying = [entry for pattern, entry in bindings if pattern.matches(resource_type, name)]
    if not applying:
        return allow_if_no_acl
    denied, allowed = _entry_allows(applying, (text, WILDCARD_PRINCIPAL), host, operation)
    return allowed and not denied


_DecisionKey = tuple[KafkaPrincipal, str, AclOperation, ResourceType, str]


class Authorizer:
    """The bindings in force and the decisions drawn from them (see the module docstring).

    Not thread-safe: the broker's event loop owns it."""

    def __init__(self, super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._bindings: set[AclBinding] = set()
        # (type, name) -> entries of LITERAL patterns; (type, prefix) -> entries of PREFIXED ones.
        self._literal: dict[tuple[ResourceType, str], set[AccessControlEntry]] = {}
        self._prefixed: dict[tuple[ResourceType, str], set[AccessControlEntry]] = {}
        # type -> {prefix length: how many prefixed patterns of the type have it}.
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        self._decisions: dict[_DecisionKey, bool] = {}

    def __len__(self) -> int:
        return len(self._bindings)

    def bindings(self) -> frozenset[AclBinding]:
        return frozenset(self._bindings)

    # -- changes --------------------------------------------------------------------------------

    def add(self, binding: AclBinding) -> bool:
        """Add a valid binding; False if it was already there (adding it again is no error)."""
        assert invalid_binding_reason(binding) is None, binding
        if binding in self._bindings:
            return False
        self._bindings.add(binding)
        pattern, entry = binding
        key = (pattern.resource_type, pattern.name)
        if pattern.pattern_type == PatternType.LITERAL:
            self._literal.setdefault(key, set()).add(entry)
        else:
            self._prefixed.setdefault(key, set()).add(entry)
            lengths = self._prefix_lengths.setdefault(pattern.resource_type, {})
            lengths[len(pattern.name)] = lengths.get(len(pattern.name), 0) + 1
        self._decisions.clear()
        return True

    def remove(self, binding: AclBinding) -> bool:
        if binding not in self._bindings:
            return False
        self._bindings.discard(binding)
        pattern, entry = binding
        key = (pattern.resource_type, pattern.name)
        index = self._literal if pattern.pattern_type == PatternType.LITERAL else self._prefixed
        entries = index[key]
        entries.discard(entry)
        if not entries:
            del index[key]
        if pattern.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths[pattern.resource_type]
            lengths[len(pattern.name)] -= 1
            if lengths[len(pattern.name)] == 0:
                del lengths[len(pattern.name)]
        self._decisions.clear()
        return True

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        """Make ``bindings`` the whole set (a reload from the store)."""
        wanted = set(bindings)
        for binding in self._bindings - wanted:
            self.remove(binding)
        for binding in wanted - self._bindings:
            self.add(binding)
        self._decisions.clear()

    def entries_of(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        """The entries bound to exactly this pattern."""
        index = self._literal if pattern.pattern_type == PatternType.LITERAL else self._prefixed
        return frozenset(index.get((pattern.resource_type, pattern.name), ()))

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects, in a stable order."""
        return sorted((binding for binding in self._bindings if acl_filter.matches(binding)), key=_sort_key)

    # -- decisions ------------------------------------------------------------------------------

    def _applying(self, resource_type: ResourceType, name: str) -> Iterator[set[AccessControlEntry]]:
        literal = self._literal
        found = literal.get((resource_type, name))
        if found is not None:
            yield found
        if name != WILDCARD_RESOURCE:
            found = literal.get((resource_type, WILDCARD_RESOURCE))
            if found is not None:
                yield found
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length <= len(name):
                    found = prefixed.get((resource_type, name[:length]))
                    if found is not None:
                        yield found

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= limits.acl_decisions_cached_max:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _decide(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        text = str(principal)
        if text in self.super_users:
            return True
        any_applies = allowed = False
        principals = (text, WILDCARD_PRINCIPAL)
        for entries in self._applying(resource_type, name):
            any_applies = True
            entry_denied, entry_allowed = _entry_allows(entries, principals, host, operation)
            if entry_denied:
                return False
            allowed = allowed or entry_allowed
        if not any_applies:
            return self.allow_if_no_acl
        return allowed

    def authorize_any(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether the principal may perform ``operation`` on some resource of the type, as Kafka
        decides it for an idempotent producer (WRITE on any topic): an ALLOW binding whose
        pattern no DENY binding covers (a literal ``*`` DENY covers every pattern; a DENY of a
        prefix covers the names and prefixes that start with it). With no binding of the type at
        all, ``allow.everyone.if.no.acl.found`` decides. Scans the type's bindings: for rare
        requests (InitProducerId), not for every produce."""
        text = str(principal)
        if text in self.super_users:
            return True
        principals = (text, WILDCARD_PRINCIPAL)
        implied = IMPLIED_BY.get(operation, frozenset())
        any_of_type = False
        denied_literal: set[str] = set()
        denied_prefixes: list[str] = []
        allowed: list[ResourcePattern] = []
        for pattern, entry in self._bindings:
            if pattern.resource_type != resource_type:
                continue
            any_of_type = True
            if entry.principal not in principals or entry.host not in (host, WILDCARD_HOST):
                continue
            if entry.permission == AclPermissionType.DENY:
                if entry.operation in (operation, AclOperation.ALL):
                    if pattern.pattern_type == PatternType.LITERAL:
                        denied_literal.add(pattern.name)
                    else:
                        denied_prefixes.append(pattern.name)
            elif entry.operation in (operation, AclOperation.ALL) or entry.operation in implied:
                allowed.append(pattern)
        if not any_of_type:
            return self.allow_if_no_acl
        if WILDCARD_RESOURCE in denied_literal:
            return False
        for pattern in allowed:
            if any(pattern.name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if pattern.pattern_type == PatternType.LITERAL and pattern.name in denied_literal:
                continue
            return True
        return False

    def authorized_operations(
        self,
        principal: KafkaPrincipal,
        host: str,
        resource_type: ResourceType,
        name: str,
        operations: Iterable[AclOperation],
    ) -> int:
        """The authorized-operations bit field: those of ``operations`` the principal may perform."""
        return operations_bit_field(
            operation
            for operation in operations
            if self.authorize(principal, host, operation, resource_type, name)
        )


def _sort_key(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    pattern, entry = binding
    return (
        pattern.resource_type,
        pattern.name,
        pattern.pattern_type,
        entry.principal,
        entry.host,
        entry.operation,
        entry.permission,
    )
