"""The ZooKeeper layout (seed 003 §3.5): every path strom uses, and the JSON of every znode.

The formats are Kafka's, so an operator who knows Kafka's tree knows strom's::

    /cluster/id                                 {"version":"1","id":"<22 chars>"}
    /controller                  (ephemeral)    {"version":1,"brokerid":1,"timestamp":"<ms>"}
    /controller_epoch                           "7"
    /brokers/ids/N               (ephemeral)    {"version":5,"host":..,"port":..,"endpoints":[..],
                                                 "listener_security_protocol_map":{..},"rack":..,
                                                 "jmx_port":-1,"timestamp":"<ms>","features":{}}
    /brokers/topics/T                           {"version":3,"topic_id":"<22 chars>",
                                                 "partitions":{"0":[1,2,3],..},
                                                 "adding_replicas":{},"removing_replicas":{}}
                                                (a partition being reassigned: "partitions" holds
                                                 target + leaving replicas, "adding_replicas":
                                                 {"0":[3]}, "removing_replicas":{"0":[1]})
    /brokers/topics/T/partitions/P/state        {"version":1,"leader":1,"leader_epoch":4,
                                                 "isr":[1,2,3],"controller_epoch":7}
    /config/topics/T                            {"version":1,"config":{"min.insync.replicas":"2"}}
    /config/users/U[/clients/C]                 {"version":1,"config":{"producer_byte_rate":"1048576.0"}}
    /config/clients/C                           (client quotas; U and C URL-encoded, <default> the default)
    /config/users/U                             {"version":1,"config":{"SCRAM-SHA-512":"salt=..,
                                                 stored_key=..,server_key=..,iterations=4096"}}
                                                (SCRAM credentials and quotas of user U side by side)
    /config/groups/G                            {"version":1,"config":{"consumer.session.timeout.ms":"50000"}}
                                                (group configs, KIP-848; G URL-encoded)
    /config/changes/config_change_<seq>         {"version":2,"entity_path":"topics/T"} (or users/U,
                                                 users/U/clients/C, clients/C, groups/G)
    /admin/delete_topics/T                      (no data)
    /latest_producer_id_block                   {"version":1,"broker":1,"block_start":"0",
                                                 "block_end":"999"}

Decoding trusts nothing: a znode that does not parse raises ``ZnodeFormatError`` naming the path.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

from strom.base import limits
from strom.cluster.model import BrokerRegistration, Endpoint, LeaderAndIsr, TopicAssignment

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_USERS_PATH = "/config/users"
CONFIG_CLIENTS_PATH = "/config/clients"
CONFIG_GROUPS_PATH = "/config/groups"
QUOTA_DEFAULT_NAME = "<default>"
QUOTA_ENTITY_KINDS = {"user": "users", "client-id": "clients"}
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS_PATH = "/admin/delete_topics"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"

# Persistent paths every broker makes sure exist when it joins (creating them is idempotent).
PERSISTENT_PATHS = (
    BROKER_IDS_PATH,
    TOPICS_PATH,
    CONFIG_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_USERS_PATH,
    CONFIG_CLIENTS_PATH,
    CONFIG_GROUPS_PATH,
    DELETE_TOPICS_PATH,
    "/cluster",
)

BROKER_FORMAT_VERSION = 5
TOPIC_FORMAT_VERSION = 3
PARTITION_STATE_FORMAT_VERSION = 1
CONTROLLER_FORMAT_VERSION = 1
CONFIG_FORMAT_VERSION = 1
CONFIG_CHANGE_FORMAT_VERSION = 2
PRODUCER_ID_BLOCK_FORMAT_VERSION = 1


class ZnodeFormatError(ValueError):
    """A znode's content is not what strom (or Kafka) writes there."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"znode {path}: {why}")
        self.path = path


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS_PATH}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS_PATH}/{topic}"


# ---- ids as Kafka writes them --------------------------------------------------------------


def uuid_to_string(value: uuid.UUID) -> str:
    """Kafka's form of a topic id: URL-safe base64 of the 16 bytes, without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_string(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character id")
    raw = base64.urlsafe_b64decode(text + "==")
    return uuid.UUID(bytes=raw)


def new_cluster_id() -> str:
    """A fresh cluster id in the form seed 003 §3.5.11 gives: 22 characters of [a-zA-Z0-9_-]."""
    return uuid_to_string(uuid.uuid4())


# ---- encoding ---------------------------------------------------------------------------------


def _encode(path: str, value: Any) -> bytes:
    data = json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")
    if len(data) > limits.znode_bytes_max:
        raise ZnodeFormatError(
            path, f"{len(data)} bytes exceed the {limits.znode_bytes_max} bytes a znode may hold"
        )
    return data


def _decode(path: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ZnodeFormatError(path, f"not JSON ({error})") from None


def _object(path: str, data: bytes) -> Mapping[str, Any]:
    value = _decode(path, data)
    if not isinstance(value, dict):
        raise ZnodeFormatError(path, "expected a JSON object")
    return value


def _int(path: str, value: Mapping[str, Any], key: str) -> int:
    item = value.get(key)
    if isinstance(item, bool) or not isinstance(item, int):
        raise ZnodeFormatError(path, f"{key!r} must be an integer, got {item!r}")
    return item


def _int_list(path: str, item: Any, what: str) -> tuple[int, ...]:
    if not isinstance(item, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in item):
        raise ZnodeFormatError(path, f"{what} must be a list of integers, got {item!r}")
    return tuple(item)


def _timestamp(path: str, value: Mapping[str, Any]) -> int:
    # Kafka writes timestamps as strings of milliseconds; accept a number too.
    item = value.get("timestamp", "0")
    try:
        return int(item)
    except (TypeError, ValueError):
        raise ZnodeFormatError(path, f"'timestamp' must be milliseconds, got {item!r}") from None


def encode_broker(registration: BrokerRegistration) -> bytes:
    path = broker_path(registration.node_id)
    value: dict[str, Any] = {
        "version": BROKER_FORMAT_VERSION,
        "host": registration.host,
        "port": registration.port,
        "endpoints": [str(endpoint) for endpoint in registration.endpoints],
        "listener_security_protocol_map": {
            endpoint.listener: endpoint.security_protocol for endpoint in registration.endpoints
        },
        "jmx_port": -1,
        "timestamp": str(registration.timestamp_ms),
        "features": {},
    }
    if registration.rack is not None:
        value["rack"] = registration.rack
    return _encode(path, value)


def decode_broker(node_id: int, data: bytes, epoch: int) -> BrokerRegistration:
    path = broker_path(node_id)
    value = _object(path, data)
    protocols = value.get("listener_security_protocol_map") or {}
    if not isinstance(protocols, dict):
        raise ZnodeFormatError(path, "'listener_security_protocol_map' must be an object")
    raw_endpoints = value.get("endpoints", [])
    if not isinstance(raw_endpoints, list):
        raise ZnodeFormatError(path, "'endpoints' must be a list")
    endpoints: list[Endpoint] = []
    for raw in raw_endpoints:
        if not isinstance(raw, str) or "://" not in raw:
            raise ZnodeFormatError(path, f"endpoint {raw!r} is not LISTENER://host:port")
        listener, _, address = raw.partition("://")
        endpoint_host, _, endpoint_port = address.rpartition(":")
        if not endpoint_port.isdigit():
            raise ZnodeFormatError(path, f"endpoint {raw!r} has no port")
        endpoints.append(
            Endpoint(listener, endpoint_host, int(endpoint_port), str(protocols.get(listener, listener)))
        )
    host: Any = value.get("host")
    port: Any = value.get("port", -1)
    if (not isinstance(host, str) or port == -1) and endpoints:
        host, port = endpoints[0].host, endpoints[0].port
    if not isinstance(host, str) or isinstance(port, bool) or not isinstance(port, int):
        raise ZnodeFormatError(path, "no host and port")
    rack = value.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise ZnodeFormatError(path, f"'rack' must be a string, got {rack!r}")
    return BrokerRegistration(node_id, host, port, tuple(endpoints), rack, _timestamp(path, value), epoch)


def encode_topic(assignment: TopicAssignment) -> bytes:
    path = topic_path(assignment.name)
    return _encode(
        path,
        {
            "version": TOPIC_FORMAT_VERSION,
            "topic_id": uuid_to_string(assignment.topic_id),
            "partitions": {str(index): list(replicas) for index, replicas in assignment.replicas.items()},
            "adding_replicas": {str(index): list(adding) for index, adding in assignment.adding.items()},
            "removing_replicas": {
                str(index): list(removing) for index, removing in assignment.removing.items()
            },
        },
    )


def decode_topic(name: str, data: bytes, version: int) -> TopicAssignment:
    path = topic_path(name)
    value = _object(path, data)
    raw_id = value.get("topic_id")
    if not isinstance(raw_id, str):
        raise ZnodeFormatError(path, "no 'topic_id' (strom needs topic ids, Kafka 2.8+ writes them)")
    try:
        topic_id = uuid_from_string(raw_id)
    except ValueError as error:
        raise ZnodeFormatError(path, f"bad 'topic_id': {error}") from None
    partitions = value.get("partitions")
    if not isinstance(partitions, dict):
        raise ZnodeFormatError(path, "'partitions' must be an object of partition -> replicas")
    replicas: dict[int, tuple[int, ...]] = {}
    for key, item in partitions.items():
        if not isinstance(key, str) or not key.isdigit():
            raise ZnodeFormatError(path, f"partition {key!r} is not a number")
        replicas[int(key)] = _int_list(path, item, f"replicas of partition {key}")
    if sorted(replicas) != list(range(len(replicas))):
        raise ZnodeFormatError(path, f"partitions must be 0..{len(replicas) - 1}, got {sorted(replicas)}")
    adding = _reassigning(path, value, "adding_replicas", replicas)
    removing = _reassigning(path, value, "removing_replicas", replicas)
    return TopicAssignment(name, topic_id, dict(sorted(replicas.items())), version, adding, removing)


def _reassigning(
    path: str, value: Mapping[str, Any], key: str, replicas: Mapping[int, tuple[int, ...]]
) -> dict[int, tuple[int, ...]]:
    """``adding_replicas`` or ``removing_replicas``: per partition being reassigned, members of
    its replicas (absent, as Kafka before 2.4 wrote it: none)."""
    found = value.get(key, {})
    if not isinstance(found, dict):
        raise ZnodeFormatError(path, f"{key!r} must be an object of partition -> replicas")
    members: dict[int, tuple[int, ...]] = {}
    for index, item in found.items():
        if not isinstance(index, str) or not index.isdigit() or int(index) not in replicas:
            raise ZnodeFormatError(path, f"{key}: {index!r} is not a partition of the topic")
        listed = _int_list(path, item, f"{key} of partition {index}")
        if not set(listed) <= set(replicas[int(index)]):
            raise ZnodeFormatError(path, f"{key} of partition {index} are not all among its replicas")
        if listed:
            members[int(index)] = listed
    return dict(sorted(members.items()))


def encode_partition_state(topic: str, partition: int, state: LeaderAndIsr) -> bytes:
    return _encode(
        partition_state_path(topic, partition),
        {
            "version": PARTITION_STATE_FORMAT_VERSION,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "controller_epoch": state.controller_epoch,
        },
    )


def decode_partition_state(topic: str, partition: int, data: bytes) -> LeaderAndIsr:
    path = partition_state_path(topic, partition)
    value = _object(path, data)
    return LeaderAndIsr(
        leader=_int(path, value, "leader"),
        leader_epoch=_int(path, value, "leader_epoch"),
        isr=_int_list(path, value.get("isr"), "'isr'"),
        controller_epoch=_int(path, value, "controller_epoch"),
    )


def encode_controller(node_id: int, timestamp_ms: int) -> bytes:
    return _encode(
        CONTROLLER_PATH,
        {"version": CONTROLLER_FORMAT_VERSION, "brokerid": node_id, "timestamp": str(timestamp_ms)},
    )


def decode_controller(data: bytes) -> int:
    """The controller's node id."""
    return _int(CONTROLLER_PATH, _object(CONTROLLER_PATH, data), "brokerid")


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    try:
        epoch = int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ZnodeFormatError(CONTROLLER_EPOCH_PATH, f"not an integer: {data[:40]!r}") from None
    if epoch < 0:
        raise ZnodeFormatError(CONTROLLER_EPOCH_PATH, f"negative epoch {epoch}")
    return epoch


def encode_cluster_id(cluster_id: str) -> bytes:
    return _encode(CLUSTER_ID_PATH, {"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    value = _object(CLUSTER_ID_PATH, data)
    cluster_id = value.get("id")
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ZnodeFormatError(CLUSTER_ID_PATH, "no 'id'")
    return cluster_id


def encode_topic_config(topic: str, config: Mapping[str, str]) -> bytes:
    return _encode(topic_config_path(topic), {"version": CONFIG_FORMAT_VERSION, "config": dict(config)})


def decode_topic_config(topic: str, data: bytes) -> dict[str, str]:
    path = topic_config_path(topic)
    config = _object(path, data).get("config", {})
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZnodeFormatError(path, "'config' must be an object of strings")
    return dict(config)


def encode_config_change(topic: str) -> bytes:
    return encode_entity_change(f"topics/{topic}")


def encode_entity_change(entity_path: str) -> bytes:
    """A change notification for any entity (``topics/T``, ``users/U``)."""
    return _encode(CONFIG_CHANGES_PATH, {"version": CONFIG_CHANGE_FORMAT_VERSION, "entity_path": entity_path})


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS_PATH}/{user}"


def encode_user_config(user: str, config: Mapping[str, str]) -> bytes:
    """A user's configs as Kafka keeps them: SCRAM credentials and quotas side by side."""
    return _encode(user_config_path(user), {"version": CONFIG_FORMAT_VERSION, "config": dict(config)})


def decode_user_config(user: str, data: bytes) -> dict[str, str]:
    path = user_config_path(user)
    if not data:
        return {}  # made as the parent of users/U/clients/C: no config of its own yet
    config = _object(path, data).get("config", {})
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZnodeFormatError(path, "'config' must be an object of strings")
    return dict(config)


# -- client quotas ----------------------------------------------------------------------------------

# A client quota entity: (entity type, name) pairs sorted by type ("client-id" before "user"), a
# None name being the default; as ``strom.security.quotas.QuotaEntity.parts``.
QuotaEntityParts = tuple[tuple[str, str | None], ...]


def _quota_name(name: str | None) -> str:
    """Kafka's sanitized form of an entity name in a path: URL-encoded, the default ``<default>``."""
    return QUOTA_DEFAULT_NAME if name is None else quote(name, safe="")


def client_quota_entity_path(parts: QuotaEntityParts) -> str:
    """``users/U/clients/C``, ``users/U`` or ``clients/C``: the path under /config and the
    ``entity_path`` of its change notification."""
    names = dict(parts)
    steps = []
    if "user" in names:
        steps.append(f"users/{_quota_name(names['user'])}")
    if "client-id" in names:
        steps.append(f"clients/{_quota_name(names['client-id'])}")
    assert steps and set(names) <= set(QUOTA_ENTITY_KINDS), parts
    return "/".join(steps)


def quota_entity_name(text: str) -> str | None:
    return None if text == QUOTA_DEFAULT_NAME else unquote(text)


# The configs of a /config/users or /config/clients znode that are client quotas; a user's znode
# also holds its SCRAM credentials, which quota reads skip and quota writes keep.
QUOTA_CONFIG_KEYS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)


def encode_client_quota(
    entity_path: str, values: Mapping[str, float], others: Mapping[str, object] | None = None
) -> bytes:
    """An entity's quotas, beside ``others`` (the znode's configs that are not quotas: a user's
    SCRAM credentials), which are kept as they are."""
    # Kafka keeps quota values as strings of doubles.
    config: dict[str, object] = {
        key: value for key, value in (others or {}).items() if key not in QUOTA_CONFIG_KEYS
    }
    config.update({key: repr(float(value)) for key, value in sorted(values.items())})
    return _encode(f"/config/{entity_path}", {"version": CONFIG_FORMAT_VERSION, "config": config})


def decode_entity_config(path: str, data: bytes) -> dict[str, object]:
    """Every config of a /config/users or /config/clients znode (none: a parent with no data)."""
    if not data:
        return {}
    config = _object(path, data).get("config", {})
    if not isinstance(config, dict):
        raise ZnodeFormatError(path, "'config' must be an object")
    return dict(config)


def decode_client_quota(path: str, data: bytes) -> dict[str, float]:
    """The quotas a /config/users or /config/clients znode holds (none: a parent with no data)."""
    if not data:
        return {}
    config = _object(path, data).get("config", {})
    if not isinstance(config, dict):
        raise ZnodeFormatError(path, "'config' must be an object")
    values: dict[str, float] = {}
    for key, text in config.items():
        if key not in QUOTA_CONFIG_KEYS:
            continue  # a user's SCRAM credentials live beside its quotas
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise ZnodeFormatError(path, f"quota {key!r} is not a number: {text!r}") from None
        if not math.isfinite(value):
            raise ZnodeFormatError(path, f"quota {key!r} is not a finite number: {text!r}")
        values[str(key)] = value
    return values


# -- group configs (KIP-848) ------------------------------------------------------------------------


def group_config_name(group_id: str) -> str:
    """A group id as its znode is named: URL-encoded as quota names are (``a/b c`` is
    ``a%2Fb%20c``), and ``.`` / ``..`` (names ZooKeeper refuses) as ``%2E`` / ``%2E%2E``."""
    assert group_id, "a group config needs a group id"
    name = quote(group_id, safe="")
    return name.replace(".", "%2E") if name in (".", "..") else name


def group_id_of(name: str) -> str:
    """The group id a /config/groups znode name (``group_config_name``) stands for."""
    return unquote(name)


def group_config_entity_path(group_id: str) -> str:
    """``groups/G``: the path under /config and the ``entity_path`` of its change notification."""
    return f"groups/{group_config_name(group_id)}"


def group_config_path(group_id: str) -> str:
    return f"{CONFIG_GROUPS_PATH}/{group_config_name(group_id)}"


def encode_group_config(group_id: str, config: Mapping[str, str]) -> bytes:
    """A group's configs, Kafka's names, the values as text (as Kafka keeps configs)."""
    assert all(isinstance(value, str) for value in config.values()), config
    return _encode(
        group_config_path(group_id),
        {"version": CONFIG_FORMAT_VERSION, "config": dict(sorted(config.items()))},
    )


def decode_group_config(group_id: str, data: bytes) -> dict[str, str]:
    """The configs a /config/groups znode holds (none: a znode with no data)."""
    path = group_config_path(group_id)
    if not data:
        return {}
    config = _object(path, data).get("config", {})
    if not isinstance(config, dict) or not all(isinstance(value, str) for value in config.values()):
        raise ZnodeFormatError(path, "'config' must be an object of strings")
    return dict(config)


def config_change_entity(path: str, data: bytes) -> str:
    """The ``entity_path`` a config change notification names (``topics/T``, ``users/U``, ...)."""
    entity = _object(path, data).get("entity_path")
    if not isinstance(entity, str):
        raise ZnodeFormatError(path, "no 'entity_path'")
    return entity


def decode_config_change(path: str, data: bytes) -> str | None:
    """The topic a config change notification names (None for other entities: users, clients)."""
    entity = _object(path, data).get("entity_path")
    if not isinstance(entity, str):
        raise ZnodeFormatError(path, "no 'entity_path'")
    kind, _, name = entity.partition("/")
    return name if kind == "topics" and name else None


def encode_producer_id_block(broker_id: int, block_start: int, block_end: int) -> bytes:
    """The last block of producer ids handed out (ids ``block_start``..``block_end`` inclusive)."""
    return _encode(
        PRODUCER_ID_BLOCK_PATH,
        {
            "version": PRODUCER_ID_BLOCK_FORMAT_VERSION,
            "broker": broker_id,
            "block_start": str(block_start),
            "block_end": str(block_end),
        },
    )


def decode_producer_id_block_end(data: bytes) -> int:
    """The last id of the last block handed out (-1 for an empty znode: none yet)."""
    if not data:
        return -1
    value = _object(PRODUCER_ID_BLOCK_PATH, data)
    try:
        end = int(value["block_end"])
    except (KeyError, TypeError, ValueError):
        raise ZnodeFormatError(PRODUCER_ID_BLOCK_PATH, "no integer 'block_end'") from None
    if end < -1:
        raise ZnodeFormatError(PRODUCER_ID_BLOCK_PATH, f"negative block end {end}")
    return end


# ---- ACLs (Kafka's ZooKeeper layout for its authorizer) -----------------------------------------
#
#   /kafka-acl/<ResourceType>/<name>                      literal patterns
#   /kafka-acl-extended/prefixed/<ResourceType>/<name>    prefixed patterns
#       {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
#                             "operation":"Read","host":"*"}, ...]}
#   /kafka-acl-changes/acl_changes_<seq>                  "Topic:orders" (a literal resource changed)
#   /kafka-acl-extended-changes/acl_changes_<seq>         {"version":1,"resourceType":"Topic",
#                                                          "name":"pay","patternType":"PREFIXED"}
#
# Resource types, operations and permissions are written as Kafka writes them (Topic, Group,
# Cluster, TransactionalId, DelegationToken, User; Read, ClusterAction, ...; Allow, Deny). This
# module keeps them as text: the ACL model is strom.security's, which the broker maps to.

ACL_LITERAL_PATH = "/kafka-acl"
ACL_PREFIXED_PATH = "/kafka-acl-extended/prefixed"
ACL_LITERAL_CHANGES_PATH = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES_PATH = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
ACL_FORMAT_VERSION = 1
ACL_RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User")
ACL_PATTERN_LITERAL = "LITERAL"
ACL_PATTERN_PREFIXED = "PREFIXED"
ACL_PERSISTENT_PATHS = (
    ACL_LITERAL_PATH,
    ACL_PREFIXED_PATH,
    ACL_LITERAL_CHANGES_PATH,
    ACL_EXTENDED_CHANGES_PATH,
)

# (resource type as Kafka writes it, name, ACL_PATTERN_LITERAL or ACL_PATTERN_PREFIXED)
AclResourceKey = tuple[str, str, str]
# (principal, host, operation, permission type), as Kafka writes them: ("User:a", "*", "Read", "Allow")
AclEntryText = tuple[str, str, str, str]


def acl_resource_path(key: AclResourceKey) -> str:
    resource_type, name, pattern = key
    base = ACL_PREFIXED_PATH if pattern == ACL_PATTERN_PREFIXED else ACL_LITERAL_PATH
    return f"{base}/{resource_type}/{name}"


def encode_acls(key: AclResourceKey, entries: frozenset[AclEntryText]) -> bytes:
    return _encode(
        acl_resource_path(key),
        {
            "version": ACL_FORMAT_VERSION,
            "acls": [
                {"principal": principal, "permissionType": permission, "operation": operation, "host": host}
                for principal, host, operation, permission in sorted(entries)
            ],
        },
    )


def decode_acls(key: AclResourceKey, data: bytes) -> frozenset[AclEntryText]:
    path = acl_resource_path(key)
    acls = _object(path, data).get("acls")
    if not isinstance(acls, list):
        raise ZnodeFormatError(path, "'acls' must be a list")
    entries: set[AclEntryText] = set()
    for acl in acls:
        if not isinstance(acl, dict):
            raise ZnodeFormatError(path, "an ACL must be an object")
        fields = [acl.get(name) for name in ("principal", "host", "operation", "permissionType")]
        if not all(isinstance(value, str) and value for value in fields):
            raise ZnodeFormatError(path, f"an ACL needs principal, host, operation, permissionType: {acl!r}")
        principal, host, operation, permission = (str(value) for value in fields)
        entries.add((principal, host, operation, permission))
    return frozenset(entries)


def encode_acl_change(key: AclResourceKey) -> tuple[str, bytes]:
    """The notification of a change to ``key``'s ACLs: (path prefix of the sequential znode, data)."""
    resource_type, name, pattern = key
    if pattern == ACL_PATTERN_LITERAL:
        return f"{ACL_LITERAL_CHANGES_PATH}/{ACL_CHANGE_PREFIX}", f"{resource_type}:{name}".encode()
    return f"{ACL_EXTENDED_CHANGES_PATH}/{ACL_CHANGE_PREFIX}", _encode(
        ACL_EXTENDED_CHANGES_PATH,
        {"version": ACL_FORMAT_VERSION, "resourceType": resource_type, "name": name, "patternType": pattern},
    )


def decode_acl_change(path: str, data: bytes, extended: bool) -> AclResourceKey:
    if not extended:
        text = data.decode("utf-8", errors="replace")
        resource_type, separator, name = text.partition(":")
        if not separator or not resource_type or not name:
            raise ZnodeFormatError(path, f"expected ResourceType:name, got {text!r}")
        return resource_type, name, ACL_PATTERN_LITERAL
    value = _object(path, data)
    fields = [value.get(name) for name in ("resourceType", "name", "patternType")]
    if not all(isinstance(field, str) and field for field in fields):
        raise ZnodeFormatError(path, "needs resourceType, name and patternType")
    resource_type, name, pattern = (str(field) for field in fields)
    return resource_type, name, pattern
