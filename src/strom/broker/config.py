"""Broker configuration: Kafka's key names, from a properties file plus ``--set key=value``.

Every key strom honours is declared once in ``BROKER_CONFIG_KEYS`` with its type, default and
meaning; ``strom broker --help-config`` prints that table. A key Kafka documents that strom does not
use (``num.io.threads``, ``socket.send.buffer.bytes``, ... from a stock ``server.properties``) is accepted
and named in one warning at start (``unused_kafka_keys``); the list of Kafka's keys is
``strom.broker.kafka_broker_keys``, so "known but not used" is simply every Kafka key not declared
here (declaring one gives it meaning). Any other key is refused with the names it is close to.
Log defaults (``log.*``) become the default ``LogConfig`` for every topic.

Where the broker listens and what it tells clients (``listeners``, ``advertised.listeners``,
``--host``/``--port``) is worked out by ``listeners()`` and ``advertised_listeners()``; the
precedence is in ``listeners()``.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.assignors.server.registry import SERVER_ASSIGNORS
from strom.base import limits
from strom.broker.kafka_broker_keys import (
    KAFKA_BROKER_CONFIG_KEYS,
    KAFKA_DYNAMIC_BROKER_KEYS,
    is_kafka_broker_key,
)
from strom.broker.listeners import (
    ListenerError,
    format_listener,
    parse_listeners,
    parse_port,
    parse_protocol_map,
    unserved_protocols,
)
from strom.cluster.model import Endpoint
from strom.coordinator import CoordinatorConfig
from strom.coordinator.transactions import TransactionCoordinatorConfig
from strom.security.acl import parse_super_users
from strom.storage import ConfigError, LogConfig
from strom.storage.files import write_file_atomically

# group.coordinator.rebalance.protocols strom knows (Kafka's share and streams groups it does not).
REBALANCE_PROTOCOLS = ("classic", "consumer")
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


# Kafka's server.properties names its built-in assignors by class.
_KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def _assignor_name(name: str) -> str:
    return _KAFKA_ASSIGNOR_CLASSES.get(name, name)


def _list_of(value: str) -> list[str]:
    """A comma-separated list key's names, trimmed, empties dropped."""
    return [name.strip() for name in value.split(",") if name.strip()]


class BrokerConfigError(ValueError):
    """A configuration key is unknown or its value does not parse; the message names the key."""


@dataclass(frozen=True)
class ConfigKey:
    name: str
    kind: str  # "int", "long", "bool", "string", "list"
    default: str
    doc: str


_KEYS = [
    ConfigKey("broker.id", "int", "0", "This broker's node id, shown to clients in metadata."),
    ConfigKey("node.id", "int", "0", "Synonym of broker.id (--node-id)."),
    ConfigKey(
        "cluster.id",
        "string",
        "",
        "The cluster id reported to clients; generated and kept in the data directory when empty.",
    ),
    ConfigKey(
        "listeners",
        "string",
        "",
        "Where to listen: NAME://HOST:PORT[,...] (PLAINTEXT://127.0.0.1:9092; an empty host is every"
        " interface, port 0 any free port); PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL (docs/security.md). --host/--port"
        " replace the first listener's host/port. Unset: 127.0.0.1:9092 (or host.name/port).",
    ),
    ConfigKey(
        "advertised.listeners",
        "string",
        "",
        "What Metadata and FindCoordinator tell clients to connect to, per listener name"
        " (NAME://HOST:PORT[,...], names among listeners'). A listener not named here advertises its"
        " own host and port (the port it got, for port 0).",
    ),
    ConfigKey(
        "listener.security.protocol.map",
        "string",
        "",
        "Security protocol of each listener name (INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT); unset, a"
        " listener must be named after its protocol.",
    ),
    ConfigKey(
        "controller.listener.names",
        "string",
        "",
        "Listeners of a KRaft controller: strom has none, so listeners named here are not opened.",
    ),
    ConfigKey(
        "host.name", "string", "", "Deprecated by Kafka: the host to listen on when listeners is unset."
    ),
    ConfigKey("port", "int", "", "Deprecated by Kafka: the port to listen on when listeners is unset."),
    ConfigKey(
        "advertised.host.name",
        "string",
        "",
        "Deprecated by Kafka: the host advertised for the first listener when advertised.listeners is unset.",
    ),
    ConfigKey(
        "advertised.port",
        "int",
        "0",
        "Deprecated by Kafka: the port advertised for the first listener when advertised.listeners is unset.",
    ),
    ConfigKey("log.dirs", "string", "", "Data directory (same as --data-dir)."),
    ConfigKey("log.dir", "string", "", "Synonym of log.dirs."),
    ConfigKey(
        "socket.request.max.bytes",
        "int",
        str(limits.frame_bytes_max),
        "Largest request frame accepted; larger frames are refused before they are buffered and the connection is closed.",
    ),
    ConfigKey(
        "connections.max.idle.ms",
        "long",
        "600000",
        "Close a connection after this many ms in which no byte was received and none of its answers was sent, unless a request of it is in progress (a long poll, a parked join); -1 never closes idle connections. The bytes of one request must also all arrive within this or 30 s, whichever is shorter.",
    ),
    ConfigKey(
        "message.max.bytes",
        "int",
        "1048588",
        "Largest record batch accepted (topic override: max.message.bytes).",
    ),
    ConfigKey(
        "auto.create.topics.enable",
        "bool",
        "true",
        "Create a topic when a client asks metadata for it (or produces to it).",
    ),
    ConfigKey(
        "num.partitions",
        "int",
        "1",
        "Partitions of an auto-created topic, and of CreateTopics asking for the default.",
    ),
    ConfigKey(
        "default.replication.factor",
        "int",
        "1",
        "Replication factor of auto-created topics and of CreateTopics asking for the default (a single node keeps one replica).",
    ),
    ConfigKey("delete.topic.enable", "bool", "true", "Allow DeleteTopics."),
    ConfigKey(
        "log.segment.bytes",
        "int",
        "1073741824",
        "Roll a new segment when the active one would exceed this size (topic: segment.bytes).",
    ),
    ConfigKey(
        "log.roll.ms",
        "long",
        "",
        "Roll a new segment after this many ms (topic: segment.ms); overrides log.roll.hours.",
    ),
    ConfigKey("log.roll.hours", "int", "168", "Roll a new segment after this many hours."),
    ConfigKey(
        "log.retention.ms",
        "long",
        "",
        "Delete segments older than this (topic: retention.ms); -1 keeps forever. Overrides minutes/hours.",
    ),
    ConfigKey("log.retention.minutes", "int", "", "Retention in minutes; overrides log.retention.hours."),
    ConfigKey("log.retention.hours", "int", "168", "Retention in hours."),
    ConfigKey(
        "log.retention.bytes",
        "long",
        "-1",
        "Delete the oldest segments while a partition exceeds this size (topic: retention.bytes).",
    ),
    ConfigKey("log.retention.check.interval.ms", "long", "300000", "How often retention and compaction run."),
    ConfigKey(
        "log.cleaner.backoff.ms",
        "long",
        "15000",
        "How often compacted logs with inactive segments not compacted yet are compacted.",
    ),
    ConfigKey(
        "log.cleanup.policy",
        "list",
        "delete",
        "delete, compact, both (delete,compact) or empty for neither (topic: cleanup.policy).",
    ),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        "long",
        "86400000",
        "How long tombstones stay in a compacted log (topic: delete.retention.ms).",
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms",
        "long",
        "0",
        "Records younger than this are not compacted (topic: min.compaction.lag.ms).",
    ),
    ConfigKey(
        "log.flush.interval.messages",
        "long",
        str(2**63 - 1),
        "fsync a partition after this many appended messages (topic: flush.messages).",
    ),
    ConfigKey(
        "log.flush.interval.ms",
        "long",
        "",
        "fsync a partition when its oldest unflushed message is this old (topic: flush.ms).",
    ),
    ConfigKey(
        "log.flush.scheduler.interval.ms", "long", "1000", "How often the time-based flush policy is checked."
    ),
    ConfigKey(
        "quota.window.num",
        "int",
        "11",
        "Client quotas: how many samples the rate of a quota group is measured over.",
    ),
    ConfigKey(
        "quota.window.size.seconds",
        "int",
        "1",
        "Client quotas: the length of one sample; a throttle is at most num x size seconds.",
    ),
    ConfigKey(
        "log.index.interval.bytes",
        "int",
        "4096",
        "Bytes of log between two sparse index entries (topic: index.interval.bytes).",
    ),
    ConfigKey(
        "log.message.timestamp.type",
        "string",
        "CreateTime",
        "CreateTime or LogAppendTime (topic: message.timestamp.type).",
    ),
    ConfigKey("offsets.topic.num.partitions", "int", "50", "Partitions of __consumer_offsets."),
    ConfigKey(
        "transaction.state.log.num.partitions",
        "int",
        "50",
        "Partitions of __transaction_state (a transactional id's coordinator leads its partition).",
    ),
    ConfigKey(
        "transaction.state.log.replication.factor",
        "int",
        "3",
        "In a cluster: replicas of each __transaction_state partition; it is created once this many"
        " brokers are alive (COORDINATOR_NOT_AVAILABLE until then).",
    ),
    ConfigKey(
        "transaction.state.log.min.isr",
        "int",
        "2",
        "In a cluster: min.insync.replicas of __transaction_state.",
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        "int",
        "900000",
        "The largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT above).",
    ),
    ConfigKey(
        "transactional.id.expiration.ms",
        "int",
        "604800000",
        "A transactional id with no transaction and no update for this long is forgotten.",
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "int",
        "10000",
        "How often transactions past their timeout are looked for and aborted.",
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "int",
        "3600000",
        "How often idle transactional ids are looked for and expired.",
    ),
    ConfigKey(
        "offsets.commit.timeout.ms",
        "int",
        "5000",
        "In a cluster: how long an offset commit or group write waits for the in-sync replicas of its"
        " __consumer_offsets partition before the client is told to retry.",
    ),
    ConfigKey(
        "group.initial.rebalance.delay.ms", "long", "3000", "Delay before the first rebalance of a new group."
    ),
    ConfigKey(
        "group.min.session.timeout.ms", "int", "6000", "Smallest session timeout a member may ask for."
    ),
    ConfigKey(
        "group.max.session.timeout.ms", "int", "1800000", "Largest session timeout a member may ask for."
    ),
    ConfigKey("group.max.size", "int", str(2**31 - 1), "Most members a group may have."),
    # ---- the consumer group protocol (KIP-848: group.protocol=consumer) ------------------------
    ConfigKey(
        "group.coordinator.rebalance.protocols",
        "list",
        "classic,consumer",
        "The group protocols the coordinator accepts: classic (JoinGroup/SyncGroup) and consumer"
        " (ConsumerGroupHeartbeat, KIP-848); classic is required.",
    ),
    ConfigKey(
        "group.consumer.session.timeout.ms",
        "int",
        "45000",
        "A consumer-protocol member that sends no heartbeat for this long is removed from its group.",
    ),
    ConfigKey(
        "group.consumer.min.session.timeout.ms",
        "int",
        "45000",
        "Smallest group.consumer.session.timeout.ms (a group config may not go below it).",
    ),
    ConfigKey(
        "group.consumer.max.session.timeout.ms",
        "int",
        "60000",
        "Largest group.consumer.session.timeout.ms (a group config may not go above it).",
    ),
    ConfigKey(
        "group.consumer.heartbeat.interval.ms",
        "int",
        "5000",
        "How often consumer-protocol members heartbeat (told to them in every heartbeat answer).",
    ),
    ConfigKey(
        "group.consumer.min.heartbeat.interval.ms",
        "int",
        "5000",
        "Smallest group.consumer.heartbeat.interval.ms.",
    ),
    ConfigKey(
        "group.consumer.max.heartbeat.interval.ms",
        "int",
        "15000",
        "Largest group.consumer.heartbeat.interval.ms.",
    ),
    ConfigKey(
        "group.consumer.max.size", "int", str(2**31 - 1), "Most members a consumer-protocol group may have."
    ),
    ConfigKey(
        "group.consumer.assignors",
        "list",
        "uniform,range",
        "The server-side assignors consumer-protocol members may choose (group.remote.assignor);"
        " the first is used when a member names none.",
    ),
    ConfigKey(
        "group.consumer.migration.policy",
        "string",
        "bidirectional",
        "Whether a group converts between the classic and consumer protocols as its members change:"
        " bidirectional, upgrade (classic to consumer only), downgrade (consumer to classic only) or"
        " disabled.",
    ),
    ConfigKey(
        "offsets.retention.minutes", "int", "10080", "How long committed offsets of an empty group are kept."
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms", "long", "600000", "How often expired offsets are looked for."
    ),
    ConfigKey(
        "offset.metadata.max.bytes", "int", "4096", "Longest metadata string a committed offset may carry."
    ),
    # ---- a cluster (strom broker --zookeeper HOST:PORT --node-id N; docs/cluster.md) ----------
    ConfigKey(
        "zookeeper.connect",
        "string",
        "",
        "HOST:PORT[,HOST:PORT...][/chroot] of the ZooKeeper ensemble (--zookeeper): join a cluster. Unset: a single node.",
    ),
    ConfigKey(
        "zookeeper.session.timeout.ms",
        "int",
        "18000",
        "ZooKeeper session timeout: a broker silent this long is gone (its leaderships move).",
    ),
    ConfigKey(
        "zookeeper.connection.timeout.ms",
        "int",
        "",
        "How long the broker waits for ZooKeeper at start before it gives up (default: the session timeout).",
    ),
    ConfigKey(
        "broker.rack", "string", "", "This broker's rack: replicas of a partition go to different racks."
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        "bool",
        "false",
        "Elect a replica outside the ISR when no in-sync replica is alive (availability over durability).",
    ),
    ConfigKey(
        "min.insync.replicas",
        "int",
        "1",
        "acks=all is refused (NOT_ENOUGH_REPLICAS) when fewer replicas than this are in sync (topic: min.insync.replicas).",
    ),
    ConfigKey(
        "replica.lag.time.max.ms",
        "long",
        "30000",
        "A follower that has not caught up with the leader for this long leaves the ISR.",
    ),
    ConfigKey(
        "replica.fetch.wait.max.ms", "int", "500", "How long a follower's fetch waits for records at most."
    ),
    ConfigKey("replica.fetch.min.bytes", "int", "1", "Bytes a follower's fetch waits for."),
    ConfigKey("replica.fetch.max.bytes", "int", "1048576", "Bytes a follower fetches per partition at most."),
    ConfigKey(
        "replica.fetch.response.max.bytes", "int", "10485760", "Bytes a follower fetches per request at most."
    ),
    ConfigKey(
        "auto.leader.rebalance.enable",
        "bool",
        "true",
        "Move leadership back to the preferred replicas when too many partitions are led elsewhere.",
    ),
    ConfigKey(
        "leader.imbalance.check.interval.seconds", "long", "300", "How often leadership balance is checked."
    ),
    ConfigKey(
        "leader.imbalance.per.broker.percentage",
        "int",
        "10",
        "Share of a broker's preferred partitions led elsewhere that triggers a rebalance.",
    ),
    ConfigKey(
        "controlled.shutdown.enable",
        "bool",
        "true",
        "On SIGTERM, move this broker's leaderships away before stopping.",
    ),
    ConfigKey(
        "controlled.shutdown.max.retries",
        "int",
        "3",
        "Attempts at moving the leaderships away before the broker stops anyway.",
    ),
    ConfigKey(
        "controlled.shutdown.retry.backoff.ms", "long", "5000", "Pause between controlled shutdown attempts."
    ),
    ConfigKey(
        "offsets.topic.replication.factor",
        "int",
        "3",
        "Replicas of each __consumer_offsets partition; it is created once this many brokers are alive"
        " (COORDINATOR_NOT_AVAILABLE until then).",
    ),
    ConfigKey(
        "producer.id.expiration.ms",
        "long",
        "86400000",
        "Accepted for compatibility; producer state is kept while its batches are in the log.",
    ),
]

# ``authorizer.class.name`` values that turn ACL authorization on (strom's authorizer, with Kafka's
# semantics, whichever of Kafka's names a configuration carries over); empty leaves it off.
AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "strom",
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
)

_KEYS += [
    ConfigKey(
        "authorizer.class.name",
        "string",
        "",
        "Empty: no authorization, every request is allowed and CreateAcls/DescribeAcls/DeleteAcls answer"
        " SECURITY_DISABLED. 'strom' (or Kafka's kafka.security.authorizer.AclAuthorizer or"
        " org.apache.kafka.metadata.authorizer.StandardAuthorizer): every request is checked against ACLs,"
        " with Kafka's semantics.",
    ),
    ConfigKey(
        "super.users",
        "string",
        "",
        "Principals allowed everything whatever the ACLs say, separated by semicolons (User:admin;User:ops).",
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        "bool",
        "false",
        "With authorization on: whether a resource no ACL applies to is open to everyone.",
    ),
]

# ---- TLS and SASL (docs/security.md). Each may be given per listener as
# listener.name.<listener lower-case>.<key>, which wins (strom.broker.listener_security).
_KEYS += [
    ConfigKey(
        "ssl.keystore.type",
        "string",
        "PEM",
        "Format of the keystore: PEM only (Kafka's default JKS is not read).",
    ),
    ConfigKey(
        "ssl.keystore.location",
        "string",
        "",
        "PEM file holding the broker's certificate chain and its private key (SSL, SASL_SSL listeners).",
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        "string",
        "",
        "The broker's certificate chain as inline PEM (with ssl.keystore.key; instead of ssl.keystore.location).",
    ),
    ConfigKey("ssl.keystore.key", "string", "", "The broker's private key as inline PEM."),
    ConfigKey("ssl.key.password", "string", "", "Password of an encrypted private key."),
    ConfigKey("ssl.truststore.type", "string", "PEM", "Format of the truststore: PEM only."),
    ConfigKey(
        "ssl.truststore.location",
        "string",
        "",
        "PEM file of the CA certificates client certificates are checked against (ssl.client.auth).",
    ),
    ConfigKey("ssl.truststore.certificates", "string", "", "The CA certificates as inline PEM."),
    ConfigKey(
        "ssl.client.auth",
        "string",
        "none",
        "none, requested or required: ask TLS clients for a certificate; on an SSL listener its subject"
        " (RFC 2253) is the principal, User:CN=...; without one the principal is User:ANONYMOUS.",
    ),
    ConfigKey(
        "ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS versions accepted (TLSv1.2, TLSv1.3)."
    ),
    ConfigKey(
        "ssl.protocol", "string", "TLSv1.3", "Accepted for compatibility; ssl.enabled.protocols decides."
    ),
    ConfigKey(
        "sasl.enabled.mechanisms",
        "list",
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms of SASL_PLAINTEXT and SASL_SSL listeners (GSSAPI and OAUTHBEARER are not"
        " offered). PLAIN is left out of the default when no JAAS configuration names its users.",
    ),
    ConfigKey(
        "sasl.jaas.config",
        "string",
        "",
        "PLAIN's users: org.apache.kafka.common.security.plain.PlainLoginModule required"
        ' user_alice="alice-secret" ...; (or listener.name.<l>.plain.sasl.jaas.config).',
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        "long",
        "0",
        "A SASL session lasts this long (told to clients in SaslAuthenticate); a connection that did not"
        " re-authenticate by then is closed at its next request. 0: sessions do not expire.",
    ),
    ConfigKey(
        "connection.failed.authentication.delay.ms",
        "int",
        "100",
        "A failed SASL authentication is answered after this delay, then the connection is closed.",
    ),
]

# ---- How brokers of a cluster reach one another (docs/security.md, "Between brokers";
# strom.broker.listener_security.inter_broker_security).
_KEYS += [
    ConfigKey(
        "inter.broker.listener.name",
        "string",
        "",
        "The listener brokers of a cluster reach one another at (replication, the controller's"
        " requests), with its security protocol: TLS with the listener's keystore as client certificate"
        " and truststore, SASL with sasl.mechanism.inter.broker.protocol. Not with"
        " security.inter.broker.protocol. Neither set: the listener named PLAINTEXT, else the first.",
    ),
    ConfigKey(
        "security.inter.broker.protocol",
        "string",
        "",
        "Instead of inter.broker.listener.name: the listener named after this protocol"
        " (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        "string",
        "GSSAPI",
        "How a broker logs in to the others on a SASL inter-broker listener: PLAIN, SCRAM-SHA-256 or"
        " SCRAM-SHA-512 (Kafka's default GSSAPI is not offered), with the username and password of"
        " listener.name.<l>.<mechanism>.sasl.jaas.config (or sasl.jaas.config).",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        "string",
        "https",
        "https: a broker connecting to another over TLS checks that the other's certificate names the"
        " host it connects to; empty: it does not.",
    ),
]

BROKER_CONFIG_KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}

# Kafka's dynamic broker keys whose effect an operator relies on and strom does not give (data,
# limits, security): refused as unknown rather than kept without effect.
_UNHONOURED_DYNAMIC_KAFKA_KEYS = frozenset(
    {
        "compression.type",
        "log.cleaner.max.compaction.lag.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.message.timestamp.after.max.ms",
        "log.message.timestamp.before.max.ms",
        "log.message.timestamp.difference.max.ms",
        "max.connection.creation.rate",
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "principal.builder.class",
        "ssl.cipher.suites",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "transaction.partition.verification.enable",
    }
)
# Kafka's other dynamic broker keys strom does not use (thread counts, buffer sizes, Kerberos and
# OAuth login, JVM TLS providers, tiered storage), with their update mode ("per-broker" or
# "cluster-wide"): AlterConfigs takes them into the dynamic layers, where they are kept and shown
# and have no effect (librdkafka's own admin test sets sasl.kerberos.min.time.before.relogin).
UNUSED_DYNAMIC_KAFKA_KEYS: dict[str, str] = {
    name: mode
    for name, mode in KAFKA_DYNAMIC_BROKER_KEYS.items()
    if name not in BROKER_CONFIG_KEYS and name not in _UNHONOURED_DYNAMIC_KAFKA_KEYS
}

# The keys an operator may change while the broker runs (AlterConfigs / IncrementalAlterConfigs on
# the BROKER resource), for this broker (resource name = its node id) or as the cluster-wide
# default (resource name ""): the ones Kafka's documentation gives the update mode "cluster-wide"
# and strom has. They are the broker-level defaults of topic configs; every other key is read-only.
DYNAMIC_BROKER_CONFIG_KEYS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.compaction.lag.ms",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.index.interval.bytes",
        "log.message.timestamp.type",
        "message.max.bytes",
        "producer.id.expiration.ms",
    }
)
assert set(BROKER_CONFIG_KEYS) >= DYNAMIC_BROKER_CONFIG_KEYS


class ConfigLayer(enum.IntEnum):
    """Where a broker key's value comes from, highest precedence first; the values are Kafka's
    DescribeConfigs ConfigSource codes."""

    DYNAMIC_BROKER = 2  # AlterConfigs on BROKER "<node id>"
    DYNAMIC_DEFAULT = 3  # AlterConfigs on BROKER "" (cluster-wide default)
    STATIC = 4  # --config FILE / --set
    DEFAULT = 5  # the built-in default


# Where the broker listens when neither listeners, host.name/port nor --host/--port say.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9092
# The security protocols strom serves.
SERVED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
# Up to this many names are suggested for a key that is not known.
SUGGESTIONS_MAX = 3


def _suggestions(name: str) -> list[str]:
    """Known keys close to ``name``: the ones strom uses first."""
    own = difflib.get_close_matches(name, list(BROKER_CONFIG_KEYS), n=SUGGESTIONS_MAX, cutoff=0.75)
    kafka = difflib.get_close_matches(name, sorted(KAFKA_BROKER_CONFIG_KEYS), n=SUGGESTIONS_MAX, cutoff=0.75)
    return list(dict.fromkeys([*own, *kafka]))[:SUGGESTIONS_MAX]


def _unknown_keys_error(unknown: list[str]) -> BrokerConfigError:
    described = []
    for name in unknown:
        close = _suggestions(name)
        described.append(f"{name} (did you mean {' or '.join(close)}?)" if close else name)
    return BrokerConfigError(
        "unknown configuration key(s): "
        + ", ".join(described)
        + ". strom broker --help-config lists the keys strom uses; Kafka's other broker keys are"
        " accepted and ignored"
    )


def _is_listener_override(name: str) -> bool:
    """``listener.name.<listener>.<key>`` (or ``.<mechanism>.<key>``) of a key strom uses."""
    if not name.startswith("listener.name."):
        return False
    rest = name[len("listener.name.") :].partition(".")[2]
    return any(rest == key or rest.endswith("." + key) for key in BROKER_CONFIG_KEYS)


def _parse(key: ConfigKey, raw: str) -> int | bool | str:
    value = raw.strip()
    if key.kind in ("int", "long"):
        try:
            return int(value)
        except ValueError:
            raise BrokerConfigError(f"{key.name}: {raw!r} is not an integer") from None
    if key.kind == "bool":
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise BrokerConfigError(f"{key.name}: {raw!r} is not true or false")
    return value


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java-style properties file: ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    properties: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        separator = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
        if separator <= 0:
            raise BrokerConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        properties[stripped[:separator].strip()] = stripped[separator + 1 :].strip()
    return properties


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's configuration: static ``values`` (--config, --set) under two dynamic layers
    that AlterConfigs changes at run time, ``dynamic_default`` (cluster-wide) under
    ``dynamic_broker`` (this broker). A key's value is taken from the highest layer that sets it."""

    # --host / --port: when given, they replace the host / port of the first listener.
    host: str | None = None
    port: int | None = None
    data_dir: Path = Path("./data")
    values: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dynamic_default: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dynamic_broker: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(
            name for name in self.values if name not in BROKER_CONFIG_KEYS and not is_kafka_broker_key(name)
        )
        if unknown:
            raise _unknown_keys_error(unknown)
        for layer in (self.dynamic_default, self.dynamic_broker):
            refused = sorted(set(layer) - DYNAMIC_BROKER_CONFIG_KEYS - set(UNUSED_DYNAMIC_KAFKA_KEYS))
            if refused:
                raise BrokerConfigError(f"cannot update these configs dynamically: {', '.join(refused)}")
        for layer in (self.values, self.dynamic_default, self.dynamic_broker):
            for name, raw in layer.items():
                if name in BROKER_CONFIG_KEYS:
                    _parse(BROKER_CONFIG_KEYS[name], raw)
        self.log_defaults()  # validates the log.* values now, not at first use
        self.authorizer_settings()  # validates the authorizer's keys now
        self._advertised({}, resolve_hostname=False)  # validates the listeners now, not at start

    def authorizer_settings(self) -> tuple[frozenset[str], bool] | None:
        """(super users, allow everyone if no ACL is found) when authorization is on, else None."""
        class_name = self.raw("authorizer.class.name").strip()
        if not class_name:
            return None
        if class_name not in AUTHORIZER_CLASS_NAMES:
            raise BrokerConfigError(
                f"authorizer.class.name: {class_name!r} is not an authorizer strom has"
                f" (one of: {', '.join(sorted(AUTHORIZER_CLASS_NAMES))}, or empty for none)"
            )
        try:
            super_users = parse_super_users(self.raw("super.users"))
        except ValueError as error:
            raise BrokerConfigError(f"super.users: {error}") from None
        return super_users, self.get_bool("allow.everyone.if.no.acl.found")

    def unused_kafka_keys(self) -> list[str]:
        """Keys given that Kafka knows and strom does not use (accepted; the broker warns about them)."""
        return sorted(
            name for name in self.values if name not in BROKER_CONFIG_KEYS and not _is_listener_override(name)
        )

    def raw(self, name: str) -> str:
        """The key's value as text, from the highest layer that sets it."""
        for layer in (self.dynamic_broker, self.dynamic_default, self.values):
            if name in layer:
                return layer[name]
        return BROKER_CONFIG_KEYS[name].default

    def layer(self, name: str) -> ConfigLayer:
        """The layer the key's value comes from."""
        if name in self.dynamic_broker:
            return ConfigLayer.DYNAMIC_BROKER
        if name in self.dynamic_default:
            return ConfigLayer.DYNAMIC_DEFAULT
        if name in self.values:
            return ConfigLayer.STATIC
        return ConfigLayer.DEFAULT

    def layers(self, name: str) -> list[tuple[ConfigLayer, str]]:
        """Every layer that gives the key a value, highest first (the default last, if any)."""
        found = [
            (layer, values[name])
            for layer, values in (
                (ConfigLayer.DYNAMIC_BROKER, self.dynamic_broker),
                (ConfigLayer.DYNAMIC_DEFAULT, self.dynamic_default),
                (ConfigLayer.STATIC, self.values),
            )
            if name in values
        ]
        default = BROKER_CONFIG_KEYS[name].default
        if default:
            found.append((ConfigLayer.DEFAULT, default))
        return found

    def with_dynamic(
        self, dynamic_default: Mapping[str, str], dynamic_broker: Mapping[str, str]
    ) -> BrokerConfig:
        """This configuration with other dynamic layers; raises BrokerConfigError if they do not
        validate (a read-only or unknown key, a value that does not parse)."""
        return dataclasses.replace(
            self, dynamic_default=dict(dynamic_default), dynamic_broker=dict(dynamic_broker)
        )

    def get(self, name: str) -> int | bool | str:
        return _parse(BROKER_CONFIG_KEYS[name], self.raw(name))

    def is_set(self, name: str) -> bool:
        return bool(self.raw(name).strip())

    def get_int(self, name: str) -> int:
        value = self.get(name)
        assert isinstance(value, int) and not isinstance(value, bool), name
        return value

    def get_bool(self, name: str) -> bool:
        value = self.get(name)
        assert isinstance(value, bool), name
        return value

    def get_str(self, name: str) -> str:
        return str(self.get(name))

    @property
    def node_id(self) -> int:
        return self.get_int("node.id") if "node.id" in self.values else self.get_int("broker.id")

    def listeners(self) -> tuple[Endpoint, ...]:
        """The listeners this broker opens, in order. Precedence: ``listeners`` (from --config or
        --set), else the deprecated ``host.name``/``port``, else 127.0.0.1:9092; then --host and
        --port, when given, replace the host and port of the first listener. Listeners named in
        ``controller.listener.names`` are not opened (strom has no KRaft controller). Raises
        BrokerConfigError for a listener that does not parse or is not PLAINTEXT."""
        try:
            protocol_map = parse_protocol_map(self.get_str("listener.security.protocol.map"))
            if self.is_set("listeners"):
                configured = parse_listeners(self.get_str("listeners"), protocol_map)
                if not configured:
                    raise ListenerError("listeners: names no listener")
            else:
                port = (
                    parse_port(self.raw("port"), "port", allow_zero=True)
                    if self.is_set("port")
                    else DEFAULT_PORT
                )
                host = self.get_str("host.name") if self.is_set("host.name") else DEFAULT_HOST
                configured = (Endpoint("PLAINTEXT", host, port, "PLAINTEXT"),)
            controller_names = self._controller_listener_names()
            served = [endpoint for endpoint in configured if endpoint.listener not in controller_names]
            if not served:
                raise ListenerError(
                    "every listener is in controller.listener.names; strom opens only broker listeners"
                )
            refused = unserved_protocols(served, SERVED_SECURITY_PROTOCOLS)
            if refused:
                raise ListenerError(
                    "listeners: "
                    + ", ".join(f"{format_listener(e)} ({e.security_protocol})" for e in refused)
                    + ": strom serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners"
                )
            if self.host is not None or self.port is not None:
                first = served[0]
                port = (
                    first.port if self.port is None else parse_port(str(self.port), "--port", allow_zero=True)
                )
                served[0] = dataclasses.replace(
                    first, host=first.host if self.host is None else self.host, port=port
                )
        except ListenerError as error:
            raise BrokerConfigError(str(error)) from None
        return tuple(served)

    def _controller_listener_names(self) -> set[str]:
        """``controller.listener.names``: listeners of Kafka's KRaft controller, which strom neither
        opens nor advertises."""
        return {
            name.strip().upper()
            for name in self.get_str("controller.listener.names").split(",")
            if name.strip()
        }

    def advertised_listeners(self, bound_ports: Mapping[str, int] | None = None) -> tuple[Endpoint, ...]:
        """What clients are told to connect to, one endpoint per listener opened (same names, same
        order): its entry in ``advertised.listeners``, else its own host and port (``bound_ports``
        gives the port a listener of port 0 got; an empty host advertises this machine's name), with
        the deprecated ``advertised.host.name``/``advertised.port`` applied to the first listener
        when ``advertised.listeners`` is unset."""
        return self._advertised(bound_ports or {}, resolve_hostname=True)

    def _advertised(self, bound_ports: Mapping[str, int], *, resolve_hostname: bool) -> tuple[Endpoint, ...]:
        served = self.listeners()
        names = [endpoint.listener for endpoint in served]
        configured: dict[str, Endpoint] = {}
        try:
            if self.is_set("advertised.listeners"):
                protocol_map = parse_protocol_map(self.get_str("listener.security.protocol.map"))
                for endpoint in parse_listeners(
                    self.get_str("advertised.listeners"),
                    protocol_map,
                    setting="advertised.listeners",
                    advertised=True,
                ):
                    if endpoint.listener in self._controller_listener_names():
                        continue  # Kafka's combined mode advertises its controller listener: not opened
                    if endpoint.listener not in names:
                        raise ListenerError(
                            f"advertised.listeners: {format_listener(endpoint)}: listener {endpoint.listener} is not"
                            f" one the broker opens ({', '.join(names)})"
                        )
                    configured[endpoint.listener] = endpoint
            advertised: list[Endpoint] = []
            for index, endpoint in enumerate(served):
                found = configured.get(endpoint.listener)
                if found is None:
                    host, port = endpoint.host, bound_ports.get(endpoint.listener, endpoint.port)
                    if index == 0 and not configured:
                        host = self.get_str("advertised.host.name") or host
                        if self.get_int("advertised.port"):
                            port = parse_port(
                                self.raw("advertised.port"), "advertised.port", allow_zero=False
                            )
                    if host in ("0.0.0.0", "::"):
                        raise ListenerError(
                            f"listening on {host} (every interface) needs the address clients should use:"
                            f" set advertised.listeners={endpoint.listener}://HOST:PORT"
                        )
                    if not host and resolve_hostname:
                        host = socket.getfqdn()  # as Kafka: an empty host advertises the machine's name
                    found = dataclasses.replace(endpoint, host=host, port=port)
                advertised.append(found)
        except ListenerError as error:
            raise BrokerConfigError(str(error)) from None
        return tuple(advertised)

    @property
    def frame_bytes_max(self) -> int:
        return self.get_int("socket.request.max.bytes")

    def retention_ms(self) -> int:
        if self.is_set("log.retention.ms"):
            return self.get_int("log.retention.ms")
        if self.is_set("log.retention.minutes"):
            return self.get_int("log.retention.minutes") * 60_000
        return self.get_int("log.retention.hours") * 3_600_000

    def segment_ms(self) -> int:
        if self.is_set("log.roll.ms"):
            return self.get_int("log.roll.ms")
        return self.get_int("log.roll.hours") * 3_600_000

    def log_defaults(self) -> LogConfig:
        """The LogConfig every topic starts from (topic overrides apply on top)."""
        properties = {
            "segment.bytes": str(self.get_int("log.segment.bytes")),
            "segment.ms": str(self.segment_ms()),
            "retention.ms": str(self.retention_ms()),
            "retention.bytes": str(self.get_int("log.retention.bytes")),
            "cleanup.policy": self.get_str("log.cleanup.policy"),
            "delete.retention.ms": str(self.get_int("log.cleaner.delete.retention.ms")),
            "min.compaction.lag.ms": str(self.get_int("log.cleaner.min.compaction.lag.ms")),
            "flush.messages": str(self.get_int("log.flush.interval.messages")),
            "index.interval.bytes": str(self.get_int("log.index.interval.bytes")),
            "max.message.bytes": str(self.get_int("message.max.bytes")),
            "message.timestamp.type": self.get_str("log.message.timestamp.type"),
            "min.insync.replicas": str(self.get_int("min.insync.replicas")),
            "unclean.leader.election.enable": str(self.get_bool("unclean.leader.election.enable")).lower(),
        }
        if self.is_set("log.flush.interval.ms"):
            properties["flush.ms"] = str(self.get_int("log.flush.interval.ms"))
        try:
            return LogConfig.from_properties(properties)
        except (ValueError, ConfigError) as error:
            raise BrokerConfigError(str(error)) from None

    def coordinator_config(self) -> CoordinatorConfig:
        """The group coordinator's settings; raises BrokerConfigError for consumer-protocol
        settings that contradict each other (as Kafka refuses to start with them)."""
        return CoordinatorConfig(
            group_initial_rebalance_delay_ms=self.get_int("group.initial.rebalance.delay.ms"),
            group_min_session_timeout_ms=self.get_int("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=self.get_int("group.max.session.timeout.ms"),
            group_max_size=self.get_int("group.max.size"),
            offsets_retention_minutes=self.get_int("offsets.retention.minutes"),
            offsets_retention_check_interval_ms=self.get_int("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes=self.get_int("offset.metadata.max.bytes"),
            offsets_topic_num_partitions=self.get_int("offsets.topic.num.partitions"),
            offsets_commit_timeout_ms=self.get_int("offsets.commit.timeout.ms"),
            **self._consumer_group_settings(),
        )

    def _consumer_group_settings(self) -> dict[str, Any]:
        """The group.consumer.* keys and group.coordinator.rebalance.protocols, checked."""
        session = self.get_int("group.consumer.session.timeout.ms")
        session_min = self.get_int("group.consumer.min.session.timeout.ms")
        session_max = self.get_int("group.consumer.max.session.timeout.ms")
        heartbeat = self.get_int("group.consumer.heartbeat.interval.ms")
        heartbeat_min = self.get_int("group.consumer.min.heartbeat.interval.ms")
        heartbeat_max = self.get_int("group.consumer.max.heartbeat.interval.ms")
        max_size = self.get_int("group.consumer.max.size")
        for name, value in (
            ("group.consumer.min.session.timeout.ms", session_min),
            ("group.consumer.min.heartbeat.interval.ms", heartbeat_min),
            ("group.consumer.max.size", max_size),
        ):
            if value < 1:
                raise BrokerConfigError(f"{name}: {value} must be at least 1")
        if not session_min <= session <= session_max:
            raise BrokerConfigError(
                f"group.consumer.session.timeout.ms: {session} must lie between"
                f" group.consumer.min.session.timeout.ms ({session_min}) and"
                f" group.consumer.max.session.timeout.ms ({session_max})"
            )
        if not heartbeat_min <= heartbeat <= heartbeat_max:
            raise BrokerConfigError(
                f"group.consumer.heartbeat.interval.ms: {heartbeat} must lie between"
                f" group.consumer.min.heartbeat.interval.ms ({heartbeat_min}) and"
                f" group.consumer.max.heartbeat.interval.ms ({heartbeat_max})"
            )
        if heartbeat >= session:
            raise BrokerConfigError(
                f"group.consumer.heartbeat.interval.ms ({heartbeat}) must be below"
                f" group.consumer.session.timeout.ms ({session})"
            )
        protocols = [name.lower() for name in _list_of(self.get_str("group.coordinator.rebalance.protocols"))]
        unknown = [name for name in protocols if name not in REBALANCE_PROTOCOLS]
        if unknown:
            raise BrokerConfigError(
                f"group.coordinator.rebalance.protocols: unknown {', '.join(unknown)}"
                f" (strom offers {', '.join(REBALANCE_PROTOCOLS)})"
            )
        if "classic" not in protocols:
            raise BrokerConfigError("group.coordinator.rebalance.protocols: classic must be enabled")
        assignors = tuple(
            dict.fromkeys(_assignor_name(name) for name in _list_of(self.get_str("group.consumer.assignors")))
        )
        if not assignors:
            raise BrokerConfigError("group.consumer.assignors: names no assignor")
        unknown = [name for name in assignors if name not in SERVER_ASSIGNORS]
        if unknown:
            raise BrokerConfigError(
                f"group.consumer.assignors: no server-side assignor named {', '.join(unknown)}"
                f" (strom has {', '.join(sorted(SERVER_ASSIGNORS))})"
            )
        policy = self.get_str("group.consumer.migration.policy").lower()
        if policy not in MIGRATION_POLICIES:
            raise BrokerConfigError(
                f"group.consumer.migration.policy: {policy!r} is not one of {', '.join(MIGRATION_POLICIES)}"
            )
        return {
            "consumer_group_session_timeout_ms": session,
            "consumer_group_min_session_timeout_ms": session_min,
            "consumer_group_max_session_timeout_ms": session_max,
            "consumer_group_heartbeat_interval_ms": heartbeat,
            "consumer_group_min_heartbeat_interval_ms": heartbeat_min,
            "consumer_group_max_heartbeat_interval_ms": heartbeat_max,
            "consumer_group_max_size": max_size,
            "consumer_group_assignors": assignors,
            "rebalance_protocols": frozenset(protocols),
            "consumer_group_migration_policy": policy,
        }

    def transaction_config(self) -> TransactionCoordinatorConfig:
        try:
            return TransactionCoordinatorConfig(
                transaction_state_log_num_partitions=self.get_int("transaction.state.log.num.partitions"),
                transaction_max_timeout_ms=self.get_int("transaction.max.timeout.ms"),
                transactional_id_expiration_ms=self.get_int("transactional.id.expiration.ms"),
                transaction_abort_timed_out_transaction_cleanup_interval_ms=self.get_int(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                ),
                transaction_remove_expired_transaction_cleanup_interval_ms=self.get_int(
                    "transaction.remove.expired.transaction.cleanup.interval.ms"
                ),
            )
        except ValueError as error:
            raise BrokerConfigError(str(error)) from None

    def cluster_id(self) -> str:
        """The configured cluster id, else one generated once and kept in the data directory."""
        configured = self.get_str("cluster.id")
        if configured:
            return configured
        path = self.data_dir / "cluster.id"
        if path.exists():
            return path.read_text(encoding="utf-8").strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        generated = uuid.uuid4().hex[:22]
        path.write_text(generated + "\n", encoding="utf-8")
        return generated


# The dynamic layers live in the data directory, so a restart keeps what AlterConfigs set.
DYNAMIC_CONFIGS_FILE_NAME = "dynamic-broker-configs.json"


@dataclass(frozen=True)
class DynamicConfigs:
    """The dynamic layers as persisted: the cluster-wide default and this broker's own."""

    default: Mapping[str, str] = dataclasses.field(default_factory=dict)
    broker: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _dynamic_document(data_dir: Path) -> dict[str, object]:
    path = data_dir / DYNAMIC_CONFIGS_FILE_NAME
    if not path.exists():
        return {}
    document = json.loads(path.read_bytes())
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


def _string_map(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(key): str(item) for key, item in value.items()}


def load_dynamic_configs(data_dir: Path, node_id: int) -> tuple[DynamicConfigs, list[str]]:
    """The dynamic layers kept in ``data_dir`` for broker ``node_id``, and a line for each entry
    skipped because it no longer validates (a broker always starts on its own data)."""
    try:
        document = _dynamic_document(data_dir)
    except (OSError, ValueError) as error:
        return DynamicConfigs(), [f"ignoring unreadable {data_dir / DYNAMIC_CONFIGS_FILE_NAME}: {error}"]
    brokers = document.get("brokers")
    layers = (
        _string_map(document.get("default")),
        _string_map(brokers.get(str(node_id)) if isinstance(brokers, dict) else None),
    )
    messages: list[str] = []
    valid: list[dict[str, str]] = []
    for layer in layers:
        kept: dict[str, str] = {}
        for name, raw in layer.items():
            try:
                if name in UNUSED_DYNAMIC_KAFKA_KEYS:
                    kept[name] = raw  # Kafka's, not used: kept as it was set
                    continue
                if name not in DYNAMIC_BROKER_CONFIG_KEYS:
                    raise BrokerConfigError(f"{name} cannot be updated dynamically")
                _parse(BROKER_CONFIG_KEYS[name], raw)
            except BrokerConfigError as error:
                messages.append(f"ignoring dynamic broker config {name}={raw!r}: {error}")
                continue
            kept[name] = raw
        valid.append(kept)
    return DynamicConfigs(default=valid[0], broker=valid[1]), messages


def with_persisted_dynamic_configs(config: BrokerConfig) -> tuple[BrokerConfig, list[str]]:
    """``config`` under the dynamic layers kept in its data directory, and lines saying what was
    skipped because it no longer validates."""
    dynamic, messages = load_dynamic_configs(config.data_dir, config.node_id)
    if not dynamic.default and not dynamic.broker:
        return config, messages
    try:
        return config.with_dynamic(dynamic.default, dynamic.broker), messages
    except BrokerConfigError as error:
        return config, [*messages, f"ignoring the dynamic broker configs: {error}"]


def save_dynamic_configs(data_dir: Path, node_id: int, dynamic: DynamicConfigs) -> None:
    """Persist the dynamic layers (atomically, fsynced) before they are applied."""
    document = _dynamic_document(data_dir)
    brokers = document.get("brokers")
    brokers = dict(brokers) if isinstance(brokers, dict) else {}
    brokers[str(node_id)] = dict(dynamic.broker)
    document = {"default": dict(dynamic.default), "brokers": brokers}
    data_dir.mkdir(parents=True, exist_ok=True)
    write_file_atomically(
        data_dir / DYNAMIC_CONFIGS_FILE_NAME, json.dumps(document, indent=1, sort_keys=True).encode()
    )


def help_config_text() -> str:
    """The table printed by ``strom broker --help-config``."""
    width = max(len(name) for name in BROKER_CONFIG_KEYS)
    lines = [
        "Broker configuration keys (Kafka's names; --config FILE and --set key=value).",
        "Keys marked dynamic can also be changed while the broker runs, with AlterConfigs or",
        'IncrementalAlterConfigs on the BROKER resource (its node id, or "" for the cluster-wide',
        "default); the broker keeps them in its data directory and they win over --config and --set.",
        "Any other key Kafka documents (num.io.threads, num.network.threads, ...) is accepted and",
        "ignored, with one warning naming them at start; a key Kafka does not know is refused.",
        "",
    ]
    for key in _KEYS:
        default = key.default if key.default else "(unset)"
        dynamic = "  dynamic" if key.name in DYNAMIC_BROKER_CONFIG_KEYS else ""
        lines.append(f"  {key.name:<{width}}  {key.kind:<6}  default {default}{dynamic}")
        lines.append(f"  {'':<{width}}  {key.doc}")
    return "\n".join(lines)
