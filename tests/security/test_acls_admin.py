"""CreateAcls, DescribeAcls and DeleteAcls against a real broker: strom's admin client and
``strom acls``, kafka-python's admin client, Kafka's per-ACL errors, SECURITY_DISABLED without an
authorizer, and ACLs surviving a restart."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest

from strom.client.admin import Admin
from strom.client.errors import BrokerResponseError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from strom.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from strom.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.compat.cli_support import run_strom
from tests.compat.conftest import BrokerProcess, StartBroker, start_broker  # noqa: F401
from tests.compat.wire import WireClient
from tests.security.acl_support import ANONYMOUS, authorizing_settings

KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka.admin import (
        ACLFilter,
        ACLResourcePatternType,
        KafkaAdminClient,
    )
    from kafka.admin import ACLOperation as KafkaPythonOperation
    from kafka.admin import ACLPermissionType as KafkaPythonPermission
    from kafka.admin import ResourcePatternFilter as KafkaPythonPatternFilter
    from kafka.admin import ResourceType as KafkaPythonResourceType

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

READ_PAYMENTS = AclBinding(
    ResourcePattern(ResourceType.TOPIC, "pay", PatternType.PREFIXED),
    AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
)
DENY_GROUP = AclBinding(
    ResourcePattern(ResourceType.GROUP, "g1", PatternType.LITERAL),
    AccessControlEntry("User:bob", "10.0.0.1", AclOperation.ALL, AclPermissionType.DENY),
)


@pytest.fixture
def super_broker(start_broker: StartBroker) -> Iterator[BrokerProcess]:  # noqa: F811
    """A broker with authorization on whose super user is ANONYMOUS (every connection here)."""
    yield start_broker(authorizing_settings(ANONYMOUS))


def _creation(
    resource_type: int, pattern_type: int, operation: int, permission: int
) -> CreateAclsRequest.AclCreation:
    return CreateAclsRequest.AclCreation(
        resource_type=resource_type,
        resource_name="t",
        resource_pattern_type=pattern_type,
        principal="User:alice",
        host="*",
        operation=operation,
        permission_type=permission,
    )


def test_strom_admin_creates_describes_deletes_and_acls_survive_a_restart(
    super_broker: BrokerProcess,
) -> None:
    with Admin(bootstrap_servers=super_broker.bootstrap) as admin:
        admin.create_acls([READ_PAYMENTS, DENY_GROUP])
        admin.create_acls([READ_PAYMENTS])  # again: no error, no duplicate
        assert set(admin.describe_acls()) == {READ_PAYMENTS, DENY_GROUP}
        match = AclBindingFilter(
            ResourceType.TOPIC,
            "payments",
            PatternType.MATCH,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        assert admin.describe_acls(match) == [READ_PAYMENTS]
    super_broker.restart()
    with Admin(bootstrap_servers=super_broker.bootstrap) as admin:
        assert set(admin.describe_acls()) == {READ_PAYMENTS, DENY_GROUP}
        by_principal = AclBindingFilter(
            ResourceType.ANY, None, PatternType.ANY, "User:bob", None, AclOperation.ANY, AclPermissionType.ANY
        )
        assert admin.delete_acls([by_principal]) == [DENY_GROUP]
        assert admin.describe_acls() == [READ_PAYMENTS]


def test_invalid_bindings_are_refused_one_by_one(super_broker: BrokerProcess) -> None:
    request = CreateAclsRequest(
        creations=[
            _creation(2, 3, 3, 3),  # TOPIC LITERAL READ ALLOW: fine
            _creation(2, 2, 3, 3),  # MATCH is for filters
            _creation(1, 3, 3, 3),  # resource type ANY
            _creation(2, 3, 1, 3),  # operation ANY
            _creation(2, 3, 3, 1),  # permission ANY
            _creation(0, 3, 3, 3),  # UNKNOWN
            _creation(2, 9, 3, 3),  # a code Kafka does not have
        ]
    )
    with WireClient(super_broker.port) as client:
        response = client.round_trip(request, CreateAclsResponse, 3)
        assert [result.error_code for result in response.results] == [0] + [ErrorCode.INVALID_REQUEST] * 6
        described = client.round_trip(
            DescribeAclsRequest(
                resource_type_filter=1,
                resource_name_filter=None,
                pattern_type_filter=1,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
            DescribeAclsResponse,
            3,
        )
        assert [(resource.resource_name, len(resource.acls)) for resource in described.resources] == [
            ("t", 1)
        ]
        # v0 knows only literal patterns: a v0 filter sees the literal binding.
        old = client.round_trip(
            DescribeAclsRequest(
                resource_type_filter=1,
                resource_name_filter=None,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            ),
            DescribeAclsResponse,
            0,
        )
        assert old.error_code == 0 and len(old.resources) == 1
        refused = client.round_trip(
            DeleteAclsRequest(
                filters=[
                    DeleteAclsRequest.DeleteAclsFilter(
                        resource_type_filter=0, pattern_type_filter=1, operation=1, permission_type=1
                    )
                ]
            ),
            DeleteAclsResponse,
            3,
        )
        assert [result.error_code for result in refused.filter_results] == [ErrorCode.INVALID_REQUEST]


def test_kafka_python_admin_reads_and_deletes_acls(super_broker: BrokerProcess) -> None:
    with Admin(bootstrap_servers=super_broker.bootstrap) as admin:
        admin.create_acls([READ_PAYMENTS])
    client = KafkaAdminClient(bootstrap_servers=super_broker.bootstrap)
    try:
        everything = ACLFilter(
            principal=None,
            host=None,
            operation=KafkaPythonOperation.ANY,
            permission_type=KafkaPythonPermission.ANY,
            resource_pattern=KafkaPythonPatternFilter(
                KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY
            ),
        )
        found, error = client.describe_acls(everything)
        assert error.errno == 0
        assert [(acl.principal, acl.resource_pattern.resource_name) for acl in found] == [
            ("User:alice", "pay")
        ]
        deleted = client.delete_acls([everything])
        assert len(deleted) == 1 and len(deleted[0][1]) == 1
    finally:
        client.close()


def test_without_an_authorizer_acl_requests_are_security_disabled(start_broker: StartBroker) -> None:  # noqa: F811
    broker = start_broker()
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        with pytest.raises(BrokerResponseError) as refused:
            admin.describe_acls()
        assert refused.value.code == ErrorCode.SECURITY_DISABLED
        with pytest.raises(BrokerResponseError) as refused:
            admin.create_acls([READ_PAYMENTS])
        assert refused.value.code == ErrorCode.SECURITY_DISABLED


def test_strom_acls_command(super_broker: BrokerProcess) -> None:
    bootstrap = ["--bootstrap-server", super_broker.bootstrap]
    added = run_strom(
        "acls", "add", *bootstrap, "--allow-principal", "User:alice", "--operation", "Read",
        "--operation", "Describe", "--topic", "pay", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert added.stdout.count("added") == 2
    denied = run_strom(
        "acls", "add", *bootstrap, "--deny-principal", "User:bob", "--operation", "All", "--group", "g1",
        "--host", "10.0.0.1",
    )  # fmt: skip
    assert denied.returncode == 0, denied.stderr
    listed = run_strom("acls", "list", *bootstrap, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {(row["resource_type"], row["name"], row["operation"], row["permission"]) for row in rows} == {
        ("topic", "pay", "Read", "allow"),
        ("topic", "pay", "Describe", "allow"),
        ("group", "g1", "All", "deny"),
    }
    matched = run_strom(
        "acls",
        "list",
        *bootstrap,
        "--topic",
        "payments",
        "--resource-pattern-type",
        "match",
        "--output",
        "json",
    )
    assert len(json.loads(matched.stdout)) == 2
    removed = run_strom(
        "acls",
        "remove",
        *bootstrap,
        "--topic",
        "pay",
        "--resource-pattern-type",
        "prefixed",
        "--operation",
        "Read",
    )
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.count("removed") == 1
    nothing = run_strom("acls", "remove", *bootstrap)
    assert nothing.returncode != 0 and "name a resource" in nothing.stderr
    rows = json.loads(run_strom("acls", "list", *bootstrap, "--output", "json").stdout)
    assert len(rows) == 2
