"""The ACL authorizer's rules, one at a time, with principals of any name (no broker needed)."""

from __future__ import annotations

import pytest

from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_from_json,
    binding_to_json,
    invalid_binding_reason,
    invalid_filter_reason,
    parse_super_users,
)
from strom.security.principal import ANONYMOUS, KafkaPrincipal

ALICE = KafkaPrincipal.user("alice")
BOB = KafkaPrincipal.user("bob")
HOST = "10.0.0.1"
TOPIC = ResourceType.TOPIC
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
Op = AclOperation


def acl(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = ALLOW,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = PatternType.LITERAL,
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern),
        AccessControlEntry(principal, host, operation, permission),
    )


def authorizer(*bindings: AclBinding, super_users: str = "", allow_if_no_acl: bool = False) -> Authorizer:
    made = Authorizer(parse_super_users(super_users), allow_if_no_acl)
    for binding in bindings:
        made.add(binding)
    return made


def test_no_acl_refuses_by_default_and_allows_when_configured() -> None:
    assert not authorizer().authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert authorizer(allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_an_acl_of_someone_else_on_the_resource_means_acls_exist() -> None:
    only_bob = authorizer(acl("t", Op.READ, principal="User:bob"), allow_if_no_acl=True)
    assert only_bob.authorize(BOB, HOST, Op.READ, TOPIC, "t")
    assert not only_bob.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert only_bob.authorize(ALICE, HOST, Op.READ, TOPIC, "other")


def test_super_users_may_do_anything() -> None:
    made = authorizer(acl("t", Op.ALL, DENY, principal="User:*"), super_users="User:root; User:alice")
    assert made.authorize(ALICE, HOST, Op.WRITE, TOPIC, "t")
    assert not made.authorize(BOB, HOST, Op.WRITE, TOPIC, "t")


def test_deny_wins_over_allow() -> None:
    made = authorizer(acl("t", Op.READ), acl("t", Op.READ, DENY, principal="User:*"))
    assert not made.authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_deny_of_describe_does_not_deny_read_but_deny_all_does() -> None:
    made = authorizer(acl("t", Op.READ), acl("t", Op.DESCRIBE, DENY))
    assert made.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert not made.authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "t")
    made.add(acl("t", Op.ALL, DENY))
    assert not made.authorize(ALICE, HOST, Op.READ, TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALL])
def test_describe_is_implied(granted: AclOperation) -> None:
    assert authorizer(acl("t", granted)).authorize(ALICE, HOST, Op.DESCRIBE, TOPIC, "t")


def test_describe_configs_implied_by_alter_configs_only() -> None:
    assert authorizer(acl("t", Op.ALTER_CONFIGS)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not authorizer(acl("t", Op.READ)).authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not authorizer(acl("t", Op.DESCRIBE)).authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_all_grants_every_operation() -> None:
    made = authorizer(acl("t", Op.ALL))
    assert all(made.authorize(ALICE, HOST, operation, TOPIC, "t") for operation in Op if operation > Op.ALL)


def test_principal_wildcard_and_hosts() -> None:
    made = authorizer(acl("t", Op.READ, principal="User:*", host=HOST))
    assert made.authorize(ANONYMOUS, HOST, Op.READ, TOPIC, "t")
    assert not made.authorize(ANONYMOUS, "10.0.0.2", Op.READ, TOPIC, "t")


def test_literal_wildcard_name_and_prefixes() -> None:
    made = authorizer(acl("*", Op.READ), acl("pay", Op.WRITE, pattern=PatternType.PREFIXED))
    assert made.authorize(ALICE, HOST, Op.READ, TOPIC, "anything")
    assert made.authorize(ALICE, HOST, Op.WRITE, TOPIC, "payments")
    assert made.authorize(ALICE, HOST, Op.WRITE, TOPIC, "pay")
    assert not made.authorize(ALICE, HOST, Op.WRITE, TOPIC, "pa")
    assert not made.authorize(ALICE, HOST, Op.READ, ResourceType.GROUP, "anything")


def test_cache_is_emptied_on_every_change() -> None:
    made = authorizer()
    assert not made.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    binding = acl("t", Op.READ)
    made.add(binding)
    assert made.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    made.remove(binding)
    assert not made.authorize(ALICE, HOST, Op.READ, TOPIC, "t")


@pytest.mark.parametrize(
    "binding",
    [
        acl("t", Op.READ, pattern=PatternType.MATCH),
        acl("t", Op.READ, pattern=PatternType.ANY),
        acl("t", Op.ANY),
        acl("t", Op.UNKNOWN),
        acl("t", Op.READ, AclPermissionType.ANY),
        acl("t", Op.READ, resource_type=ResourceType.ANY),
        acl("t", Op.READ, resource_type=ResourceType.UNKNOWN),
        acl("t", Op.READ, principal="alice"),
        acl("", Op.READ),
        acl("other-cluster", Op.ALTER, resource_type=ResourceType.CLUSTER),
    ],
)
def test_invalid_bindings(binding: AclBinding) -> None:
    assert invalid_binding_reason(binding) is not None


def test_filters_match_semantics() -> None:
    literal, wildcard, prefixed = (
        acl("payments", Op.READ),
        acl("*", Op.READ),
        acl("pay", Op.READ, pattern=PatternType.PREFIXED),
    )
    other = acl("orders", Op.READ)
    made = authorizer(literal, wildcard, prefixed, other)

    def select(name: str | None, pattern: PatternType) -> set[AclBinding]:
        return set(
            made.matching(AclBindingFilter(TOPIC, name, pattern, None, None, Op.ANY, AclPermissionType.ANY))
        )

    assert select("payments", PatternType.MATCH) == {literal, wildcard, prefixed}
    assert select("payments", PatternType.ANY) == {literal}
    assert select("pay", PatternType.PREFIXED) == {prefixed}
    assert select(None, PatternType.LITERAL) == {literal, wildcard, other}
    assert select(None, PatternType.ANY) == {literal, wildcard, prefixed, other}


def test_a_filter_principal_is_text_matched_as_it_is() -> None:
    """As Kafka: a filter's principal is compared with each entry's; one that is not a principal
    (kafka-python's own ACL test filters on "*") is not refused and matches nothing."""
    made = authorizer(acl("payments", Op.READ), acl("payments", Op.READ, principal="User:*"))

    def select(principal: str) -> list[AclBinding]:
        acl_filter = AclBindingFilter(
            TOPIC, None, PatternType.ANY, principal, None, Op.ANY, AclPermissionType.ANY
        )
        assert invalid_filter_reason(acl_filter) is None
        return list(made.matching(acl_filter))

    assert select("*") == []
    assert select("bogus") == []
    assert select("User:*") == [acl("payments", Op.READ, principal="User:*")]
    assert select("User:alice") == [acl("payments", Op.READ)]
    unknown = AclBindingFilter(TOPIC, None, PatternType.UNKNOWN, None, None, Op.ANY, AclPermissionType.ANY)
    assert invalid_filter_reason(unknown) == "pattern type UNKNOWN"


def test_json_round_trip() -> None:
    binding = acl("pay", Op.IDEMPOTENT_WRITE, DENY, pattern=PatternType.PREFIXED, host="::1")
    assert binding_from_json(binding_to_json(binding)) == binding
    with pytest.raises(ValueError):
        binding_from_json({**binding_to_json(binding), "operation": "ANY"})


def test_super_users_parse_refuses_what_is_no_principal() -> None:
    with pytest.raises(ValueError):
        parse_super_users("User:a;bob")


def test_authorize_any_for_an_idempotent_producer() -> None:
    def any_write(*bindings: AclBinding, allow_if_no_acl: bool = False) -> bool:
        return authorizer(*bindings, allow_if_no_acl=allow_if_no_acl).authorize_any(
            ALICE, HOST, Op.WRITE, TOPIC
        )

    assert not any_write()
    assert any_write(allow_if_no_acl=True)
    assert any_write(acl("t", Op.WRITE))
    assert any_write(acl("t", Op.ALL))
    assert not any_write(acl("t", Op.READ))
    assert not any_write(acl("t", Op.WRITE), acl("t", Op.WRITE, DENY))
    assert not any_write(acl("t", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert not any_write(acl("pay-eu", Op.WRITE), acl("pay", Op.WRITE, DENY, pattern=PatternType.PREFIXED))
    assert any_write(acl("t", Op.WRITE), acl("pay", Op.WRITE, DENY, pattern=PatternType.PREFIXED))
    assert not any_write(acl("t", Op.WRITE, principal="User:bob"))
    assert authorizer(super_users="User:alice").authorize_any(ALICE, HOST, Op.WRITE, TOPIC)


def test_entries_of_one_pattern() -> None:
    made = authorizer(acl("t", Op.READ), acl("t", Op.WRITE, pattern=PatternType.PREFIXED))
    pattern = ResourcePattern(TOPIC, "t", PatternType.LITERAL)
    assert {entry.operation for entry in made.entries_of(pattern)} == {Op.READ}
