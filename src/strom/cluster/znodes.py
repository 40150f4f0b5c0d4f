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
    /brokers/topics/T/partitions/P/state        {"version":1,"leader":1,"leader_epoch":4,
                                                 "isr":[1,2,3],"controller_epoch":7}
    /config/topics/T                            {"version":1,"config":{"min.insync.replicas":"2"}}
    /config/users/U                             {"version":1,"config":{"SCRAM-SHA-512":"salt=..,
                                                 stored_key=..,server_key=..,iterations=4096"}}
    /config/changes/config_change_<seq>         {"version":2,"entity_path":"topics/T"} (or users/U)
    /admin/delete_topics/T                      (no data)
    /latest_producer_id_block                   {"version":1,"broker":1,"block_start":"0",
                                                 "block_end":"999"}

Decoding trusts nothing: a znode that does not parse raises ``ZnodeFormatError`` naming the path.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from typing import Any

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
            "adding_replicas": {},
            "removing_replicas": {},
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
    return TopicAssignment(name, topic_id, dict(sorted(replicas.items())), version)


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
    config = _object(path, data).get("config", {})
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZnodeFormatError(path, "'config' must be an object of strings")
    return dict(config)


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
