"""The indexed, caching ``Authorizer`` decides as a scan of every ACL does (``naive_authorize``),
over random ACL sets, random requests, and random changes between requests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    naive_authorize,
)
from strom.security.principal import KafkaPrincipal

NAMES = ["a", "ab", "abc", "b", "ba", "*"]
USERS = ["alice", "bob", "*"]
HOSTS = ["h1", "h2", "*"]
OPERATIONS = [operation for operation in AclOperation if operation > AclOperation.ANY]
RESOURCE_TYPES = [ResourceType.TOPIC, ResourceType.GROUP]

bindings = st.builds(
    lambda resource_type, name, prefixed, user, host, operation, deny: AclBinding(
        ResourcePattern(
            resource_type, name, PatternType.PREFIXED if prefixed and name != "*" else PatternType.LITERAL
        ),
        AccessControlEntry(
            f"User:{user}", host, operation, AclPermissionType.DENY if deny else AclPermissionType.ALLOW
        ),
    ),
    st.sampled_from(RESOURCE_TYPES),
    st.sampled_from(NAMES),
    st.booleans(),
    st.sampled_from(USERS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPERATIONS),
    st.booleans(),
)
requests = st.tuples(
    st.sampled_from(["alice", "bob", "carol"]),
    st.sampled_from(["h1", "h2"]),
    st.sampled_from(OPERATIONS),
    st.sampled_from(RESOURCE_TYPES),
    st.sampled_from([*NAMES, "abcd", "c", ""]),
)


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.lists(bindings, max_size=4), st.booleans(), st.lists(requests, min_size=1, max_size=6)),
        max_size=6,
    ),
    allow_if_no_acl=st.booleans(),
    super_alice=st.booleans(),
)
def test_indexed_authorizer_agrees_with_a_scan(
    steps: list[tuple[list[AclBinding], bool, list[tuple[str, str, AclOperation, ResourceType, str]]]],
    allow_if_no_acl: bool,
    super_alice: bool,
) -> None:
    super_users = frozenset({"User:alice"}) if super_alice else frozenset()
    authorizer = Authorizer(super_users, allow_if_no_acl)
    current: set[AclBinding] = set()
    for changed, removing, asked in steps:
        for binding in changed:
            if removing:
                assert authorizer.remove(binding) == (binding in current)
                current.discard(binding)
            else:
                assert authorizer.add(binding) == (binding not in current)
                current.add(binding)
        for user, host, operation, resource_type, name in asked:
            principal = KafkaPrincipal.user(user)
            expected = naive_authorize(
                current, super_users, allow_if_no_acl, principal, host, operation, resource_type, name
            )
            # Twice: the second answer comes from the cache.
            assert authorizer.authorize(principal, host, operation, resource_type, name) == expected
            assert authorizer.authorize(principal, host, operation, resource_type, name) == expected
    assert authorizer.bindings() == current
