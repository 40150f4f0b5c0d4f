"""``strom acls``'s pure helpers: the bindings ``add`` makes and the filters ``list``/``remove`` send."""

from __future__ import annotations

import pytest

from strom.cli.acls import acls_report, bindings_to_add, filters_of, parse_operation
from strom.cli.output import UsageError
from strom.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)


@pytest.mark.parametrize(
    ("text", "operation"),
    [
        ("Read", AclOperation.READ),
        ("read", AclOperation.READ),
        ("ClusterAction", AclOperation.CLUSTER_ACTION),
        ("CLUSTER_ACTION", AclOperation.CLUSTER_ACTION),
        ("idempotent-write", AclOperation.IDEMPOTENT_WRITE),
        ("All", AclOperation.ALL),
    ],
)
def test_operations_by_kafka_acls_names(text: str, operation: AclOperation) -> None:
    assert parse_operation(text) == operation


def test_unknown_operation_lists_the_names() -> None:
    with pytest.raises(UsageError, match="DescribeConfigs"):
        parse_operation("Fly")
    with pytest.raises(UsageError):
        parse_operation("Any")  # a filter's value, not an operation


def test_add_makes_every_combination_and_the_cluster_stays_literal() -> None:
    bindings = bindings_to_add(
        [(ResourceType.TOPIC, "pay"), (ResourceType.CLUSTER, CLUSTER_NAME)],
        PatternType.PREFIXED,
        ["User:alice"],
        ["User:bob"],
        [AclOperation.READ, AclOperation.WRITE],
        ["*"],
    )
    assert len(bindings) == 2 * 2 * 2
    assert {b.pattern.pattern_type for b in bindings if b.pattern.resource_type == ResourceType.CLUSTER} == {
        PatternType.LITERAL
    }
    assert {b.entry.permission for b in bindings if b.entry.principal == "User:bob"} == {
        AclPermissionType.DENY
    }


@pytest.mark.parametrize(
    ("resources", "allow", "operations", "message"),
    [
        ([], ["User:a"], [AclOperation.READ], "name a resource"),
        ([(ResourceType.TOPIC, "t")], [], [AclOperation.READ], "name a principal"),
        ([(ResourceType.TOPIC, "t")], ["User:a"], [], "name an operation"),
    ],
)
def test_add_needs_resource_principal_and_operation(
    resources: list[tuple[ResourceType, str]], allow: list[str], operations: list[AclOperation], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        bindings_to_add(resources, PatternType.LITERAL, allow, [], operations, ["*"])


def test_filters_select_everything_left_out() -> None:
    (only,) = filters_of([], PatternType.ANY, [], [], [])
    assert only.resource_type == ResourceType.ANY and only.name is None and only.principal is None
    assert only.operation == AclOperation.ANY and only.permission == AclPermissionType.ANY
    filters = filters_of(
        [(ResourceType.TOPIC, "t")],
        PatternType.MATCH,
        [("User:a", AclPermissionType.ALLOW)],
        [AclOperation.READ, AclOperation.WRITE],
        ["10.0.0.1"],
    )
    assert len(filters) == 2 and all(f.host == "10.0.0.1" for f in filters)


def test_report_rows() -> None:
    (binding,) = bindings_to_add(
        [(ResourceType.GROUP, "g")],
        PatternType.LITERAL,
        ["User:a"],
        [],
        [AclOperation.DESCRIBE_CONFIGS],
        ["*"],
    )
    report = acls_report([binding])
    assert report.value == [
        {
            "resource_type": "group",
            "name": "g",
            "pattern_type": "literal",
            "principal": "User:a",
            "host": "*",
            "operation": "DescribeConfigs",
            "permission": "allow",
        }
    ]
    assert acls_report([]).notes == ["no ACLs"]
