"""Client configuration with Kafka's key names.

Each client takes a dict of Kafka keys (``{"bootstrap.servers": ..., "linger.ms": 5}``) and/or
keyword arguments with the dots written as underscores (``linger_ms=5``). A config class is a
dataclass whose field names are the keys with dots as underscores; values given as strings (as
they come from property files) are converted to the field's type. Unknown keys are refused with
the closest known names in the message.

Security (docs/security.md) takes the names Kafka and librdkafka use: ``security.protocol``
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``ssl.ca.location``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password``, ``ssl.endpoint.identification.algorithm`` (https or
none), ``sasl.mechanism`` (librdkafka's ``sasl.mechanisms`` too: PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512), ``sasl.username`` and ``sasl.password``. The Java client's ``sasl.jaas.config``
(``...LoginModule required username="alice" password="...";``) gives the user name and password
too, so a properties file written for Kafka's tools works unchanged.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from strom.client.errors import ConfigError

__all__ = [
    "GROUP_PROTOCOLS",
    "KEY_ALIASES",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "AdminConfig",
    "ClientConfig",
    "ConsumerConfig",
    "ProducerConfig",
    "parse_bootstrap",
]

_COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")

# ``group.protocol``: the classic group protocol or KIP-848's consumer group protocol.
GROUP_PROTOCOLS = ("classic", "consumer")
# Consumer settings that only the classic protocol uses (refused with group.protocol=consumer).
_CLASSIC_ONLY_FIELDS = ("partition_assignment_strategy", "session_timeout_ms", "heartbeat_interval_ms")

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# What strom's client can do; GSSAPI (Kerberos) and OAUTHBEARER are Kafka mechanisms it has not.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# ``https``: the broker's certificate must name the host connected to; ``none``: any name (the
# chain is still verified). Kafka's Java client spells "none" as the empty string.
_ENDPOINT_IDENTIFICATION = ("https", "none")
# Other names of a setting: librdkafka says sasl.mechanisms.
KEY_ALIASES = {"sasl.mechanisms": "sasl.mechanism"}
# The same by field name (the key with dots as underscores).
_ALIASES = {alias.replace(".", "_"): key.replace(".", "_") for alias, key in KEY_ALIASES.items()}
# Settings whose values are upper or lower case as Kafka prints them, whatever case they came in.
_UPPER_CASE_FIELDS = frozenset({"security_protocol", "sasl_mechanism"})
_SSL_FILE_FIELDS = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")


def _to_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(f"config {key!r} must be true or false, not {value!r}")


def _to_int(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"config {key!r} must be an integer, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"config {key!r} must be an integer, not {value!r}")


def _to_str(key: str, value: object) -> str:
    if isinstance(value, str):
        return value
    raise ConfigError(f"config {key!r} must be a string, not {value!r}")


def _to_str_or_list(key: str, value: object) -> str:
    """Kafka accepts comma-separated strings; we also take a list of strings."""
    if isinstance(value, list | tuple):
        if not all(isinstance(item, str) for item in value):
            raise ConfigError(f"config {key!r} must be strings, not {value!r}")
        return ",".join(value)
    return _to_str(key, value)


def _to_acks(key: str, value: object) -> int:
    if value in ("all", "-1", -1):
        return -1
    acks = _to_int(key, value)
    if acks not in (0, 1, -1):
        raise ConfigError(f"config {key!r} must be 0, 1, -1 or all, not {value!r}")
    return acks


_CONVERTERS: dict[str, Callable[[str, object], Any]] = {
    "bool": _to_bool,
    "int": _to_int,
    "str": _to_str,
    "str | None": lambda key, value: None if value is None else _to_str(key, value),
}


@dataclass
class ClientConfig:
    """Keys every client takes."""

    bootstrap_servers: str = "localhost:9092"
    client_id: str = "strom"
    request_timeout_ms: int = 30_000
    metadata_max_age_ms: int = 300_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    retry_backoff_ms: int = 100
    socket_connection_setup_timeout_ms: int = 10_000
    connections_max_idle_ms: int = 540_000
    # The largest response frame accepted from a broker.
    receive_message_max_bytes: int = 100_000_000
    # -- security (docs/security.md) --
    security_protocol: str = "PLAINTEXT"
    # PEM files. Without a CA file the system's trusted CAs verify the broker.
    ssl_ca_location: str | None = None
    # The client's own certificate (mutual TLS); its key in ssl.key.location or in the same file.
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    # Secrets stay out of repr() (and so out of logs and tracebacks).
    ssl_key_password: str | None = dataclasses.field(default=None, repr=False)
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = dataclasses.field(default=None, repr=False)
    # The Java client's way to give them: only its username and password options are read.
    sasl_jaas_config: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def key_of(cls, field_name: str) -> str:
        return field_name.replace("_", ".")

    @classmethod
    def from_settings(cls, config: Mapping[str, Any] | None = None, /, **settings: Any) -> Self:
        fields = {field.name: field for field in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        given = dict(config or {})
        given.update(settings)
        aliases_seen: set[str] = set()
        for raw_key, value in given.items():
            if not isinstance(raw_key, str):
                raise ConfigError(f"config keys are strings, not {raw_key!r}")
            field_name = raw_key.replace(".", "_")
            aliased = field_name in _ALIASES
            field_name = _ALIASES.get(field_name, field_name)
            key = cls.key_of(field_name)
            field = fields.get(field_name)
            if field is None:
                known = [cls.key_of(name) for name in fields]
                close = difflib.get_close_matches(key, known, n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise ConfigError(f"unknown {cls.__name__} key {key!r}{hint}")
            converted = cls._convert(key, field_name, str(field.type), value)
            if (
                field_name in values
                and (aliased or field_name in aliases_seen)
                and values[field_name] != converted
            ):
                other = next(cls.key_of(alias) for alias, name in _ALIASES.items() if name == field_name)
                raise ConfigError(
                    f"configs {key!r} and {other!r} (the same setting) differ: give one of them"
                )
            if aliased:
                aliases_seen.add(field_name)
            values[field_name] = converted
        cls._fill_defaults(values)
        _take_jaas_credentials(values)
        instance = cls(**values)
        instance.validate()
        return instance

    @classmethod
    def _fill_defaults(cls, values: dict[str, Any]) -> None:
        """Defaults that depend on what else was given (``values``: the fields set explicitly)."""

    @classmethod
    def _convert(cls, key: str, field_name: str, type_name: str, value: object) -> Any:
        if field_name == "acks":
            return _to_acks(key, value)
        if field_name in ("bootstrap_servers",):
            return _to_str_or_list(key, value)
        if field_name in _UPPER_CASE_FIELDS:
            return _to_str(key, value).strip().upper()
        if field_name == "ssl_endpoint_identification_algorithm":
            # Kafka's Java client disables the check with an empty value, librdkafka with "none".
            return _to_str(key, value).strip().lower() or "none"
        return _CONVERTERS[type_name](key, value)

    def validate(self) -> None:
        if not parse_bootstrap(self.bootstrap_servers):
            raise ConfigError("config 'bootstrap.servers' names no broker")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name.endswith(("_ms", "_bytes")) and isinstance(value, int) and value < 0:
                raise ConfigError(f"config {self.key_of(field.name)!r} must not be negative, not {value}")
        self._validate_security()

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def _validate_security(self) -> None:
        """Combinations that cannot work are refused here, before any connection, naming the fix."""
        self._require_choice("security_protocol", SECURITY_PROTOCOLS)
        self._require_choice("ssl_endpoint_identification_algorithm", _ENDPOINT_IDENTIFICATION)
        protocol = self.security_protocol
        if self.uses_sasl:
            if self.sasl_mechanism is None:
                raise ConfigError(
                    f"security.protocol={protocol} needs sasl.mechanism: one of {', '.join(SASL_MECHANISMS)}"
                )
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    f"config 'sasl.mechanism' must be one of {', '.join(SASL_MECHANISMS)}, "
                    f"not {self.sasl_mechanism!r} (strom's client has no GSSAPI or OAUTHBEARER)"
                )
            if not self.sasl_username:
                raise ConfigError(
                    f"security.protocol={protocol} with {self.sasl_mechanism} needs sasl.username"
                )
            if self.sasl_password is None:
                raise ConfigError(
                    f"security.protocol={protocol} with {self.sasl_mechanism} needs sasl.password"
                )
        else:
            given = [
                self.key_of(name)
                for name in ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_jaas_config")
                if getattr(self, name) is not None
            ]
            if given:
                raise ConfigError(
                    f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} set but security.protocol is "
                    f"{protocol}, which does not authenticate: use SASL_PLAINTEXT or SASL_SSL"
                )
        if self.uses_tls:
            for name in _SSL_FILE_FIELDS:
                path = getattr(self, name)
                if path is not None and not os.path.isfile(path):
                    raise ConfigError(f"config {self.key_of(name)!r}: no such file {path!r}")
            if self.ssl_key_location is not None and self.ssl_certificate_location is None:
                raise ConfigError(
                    "ssl.key.location is set without ssl.certificate.location (the key's certificate)"
                )
            if self.ssl_key_password is not None and self.ssl_certificate_location is None:
                raise ConfigError("ssl.key.password is set but there is no key: set ssl.certificate.location")
        else:
            given = [
                self.key_of(name)
                for name in (*_SSL_FILE_FIELDS, "ssl_key_password")
                if getattr(self, name) is not None
            ]
            if given:
                raise ConfigError(
                    f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} set but security.protocol is "
                    f"{protocol}, which does not use TLS: use SSL or SASL_SSL"
                )

    def _require_choice(self, field_name: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, field_name)
        if value not in choices:
            raise ConfigError(
                f"config {self.key_of(field_name)!r} must be one of {', '.join(choices)}, not {value!r}"
            )


@dataclass
class ProducerConfig(ClientConfig):
    acks: int = -1
    linger_ms: int = 5
    batch_size: int = 16_384
    compression_type: str = "none"
    retries: int = 2_147_483_647
    delivery_timeout_ms: int = 120_000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: bool = True
    max_request_size: int = 1_048_576
    # How long send() may block waiting for metadata of a topic it has not seen yet.
    max_block_ms: int = 60_000
    partitioner_ignore_keys: bool = False
    buffer_memory: int = 33_554_432
    # Makes the producer transactional (docs/client.md, Transactions); implies idempotence.
    transactional_id: str | None = None
    # How long the coordinator lets a transaction stay open before aborting it (and fencing us).
    transaction_timeout_ms: int = 60_000

    @classmethod
    def _fill_defaults(cls, values: dict[str, Any]) -> None:
        """Idempotence is on by default only where nothing given conflicts with it (acks other than
        all, retries=0, more than 5 requests in flight), as in the Java client: then it is off.
        Asked for explicitly together with a conflicting setting, ``validate`` refuses it. A
        transactional producer needs idempotence: it stays on, and a conflict is refused."""
        if "enable_idempotence" in values:
            return
        if values.get("transactional_id") is not None:
            values["enable_idempotence"] = True
            return
        conflicting = (
            values.get("acks", -1) != -1
            or values.get("retries", 1) == 0
            or values.get("max_in_flight_requests_per_connection", 5) > 5
        )
        if conflicting:
            values["enable_idempotence"] = False

    def validate(self) -> None:
        super().validate()
        self._require_choice("compression_type", _COMPRESSION_TYPES)
        if self.batch_size <= 0:
            raise ConfigError(f"config 'batch.size' must be positive, not {self.batch_size}")
        if self.max_in_flight_requests_per_connection < 1:
            raise ConfigError("config 'max.in.flight.requests.per.connection' must be at least 1")
        if self.enable_idempotence:
            if self.acks != -1 and self.transactional_id is not None:
                raise ConfigError(f"transactional.id requires acks=all, not acks={self.acks}")
            if self.acks != -1:
                raise ConfigError(
                    f"enable.idempotence=true requires acks=all, not acks={self.acks} "
                    "(leave enable.idempotence unset and it turns off by itself for acks 0 and 1)"
                )
            if self.max_in_flight_requests_per_connection > 5:
                raise ConfigError("enable.idempotence requires max.in.flight.requests.per.connection <= 5")
            if self.retries == 0:
                raise ConfigError("enable.idempotence requires retries > 0")
        if self.transactional_id is not None:
            if not self.transactional_id:
                raise ConfigError("config 'transactional.id' must not be empty")
            if not self.enable_idempotence:
                raise ConfigError(
                    "transactional.id requires enable.idempotence=true (transactions are idempotent)"
                )
            if self.transaction_timeout_ms <= 0:
                raise ConfigError(
                    f"config 'transaction.timeout.ms' must be positive, not {self.transaction_timeout_ms}"
                )


@dataclass
class ConsumerConfig(ClientConfig):
    group_id: str | None = None
    group_instance_id: str | None = None
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: str = "range,cooperative-sticky"
    # ``classic`` (JoinGroup/SyncGroup/Heartbeat, assignment by the group's leader) or ``consumer``
    # (KIP-848: ConsumerGroupHeartbeat, assignment by the coordinator). docs/client.md says what differs.
    group_protocol: str = "classic"
    # With group.protocol=consumer: the coordinator's assignor to use (``uniform``, ``range``); None
    # lets the broker choose (the first of its group.consumer.assignors).
    group_remote_assignor: str | None = None
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    fetch_max_bytes: int = 52_428_800
    client_rack: str = ""
    max_poll_records: int = 500
    isolation_level: str = "read_uncommitted"
    check_crcs: bool = True

    @classmethod
    def _convert(cls, key: str, field_name: str, type_name: str, value: object) -> Any:
        if field_name == "partition_assignment_strategy":
            return _to_str_or_list(key, value)
        if field_name == "group_protocol":
            # The Java client takes CLASSIC/CONSUMER in any case.
            return _to_str(key, value).strip().lower()
        return super()._convert(key, field_name, type_name, value)

    @classmethod
    def _fill_defaults(cls, values: dict[str, Any]) -> None:
        """Settings of one group protocol given with the other are refused, as the Java client
        (ConfigException) and librdkafka (a configuration error) do: with ``consumer`` the
        coordinator assigns and sets the session and heartbeat timing (group.consumer.* on the
        broker), so a client value would be silently ignored; ``group.remote.assignor`` means
        nothing to the classic protocol."""
        protocol = values.get("group_protocol", "classic")
        if protocol == "consumer":
            given = [cls.key_of(name) for name in _CLASSIC_ONLY_FIELDS if name in values]
            if given:
                raise ConfigError(
                    f"{', '.join(given)} cannot be set when group.protocol=consumer: the coordinator "
                    "assigns the partitions and sets the session timeout and heartbeat interval "
                    "(broker settings group.consumer.*); choose its assignor with group.remote.assignor"
                )
        elif protocol == "classic" and values.get("group_remote_assignor") is not None:
            raise ConfigError(
                "group.remote.assignor cannot be set when group.protocol=classic: it names a "
                "coordinator-side assignor of group.protocol=consumer; classic groups take "
                "partition.assignment.strategy"
            )

    def validate(self) -> None:
        super().validate()
        self._require_choice("group_protocol", GROUP_PROTOCOLS)
        if self.group_remote_assignor is not None and not self.group_remote_assignor.strip():
            raise ConfigError(
                "config 'group.remote.assignor' must not be empty (leave it unset for the broker's default)"
            )
        self._require_choice("auto_offset_reset", ("earliest", "latest", "none"))
        self._require_choice("isolation_level", ("read_uncommitted", "read_committed"))
        if self.max_poll_records < 1:
            raise ConfigError("config 'max.poll.records' must be at least 1")


@dataclass
class AdminConfig(ClientConfig):
    pass


# One option of a JAAS login module line: name="quoted value" (backslash escapes) or name=word.
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def _take_jaas_credentials(values: dict[str, Any]) -> None:
    """``sasl.jaas.config``'s username and password, where sasl.username/sasl.password are not
    given; given both ways, they must agree."""
    jaas = values.get("sasl_jaas_config")
    if jaas is None:
        return
    options = {
        match.group(1): re.sub(r"\\(.)", r"\1", match.group(2))
        if match.group(2) is not None
        else match.group(3)
        for match in _JAAS_OPTION.finditer(jaas)
    }
    for option, field_name in (("username", "sasl_username"), ("password", "sasl_password")):
        if option not in options:
            continue
        if values.get(field_name) is None:
            values[field_name] = options[option]
        elif values[field_name] != options[option]:
            raise ConfigError(f"sasl.jaas.config's {option} differs from {ClientConfig.key_of(field_name)}")


def parse_bootstrap(bootstrap_servers: str) -> list[tuple[str, int]]:
    """``"host:port,host2:port"`` -> [(host, port), ...]; IPv6 hosts in brackets."""
    addresses: list[tuple[str, int]] = []
    for entry in bootstrap_servers.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        host, separator, port_text = entry.rpartition(":")
        if not separator:
            host, port_text = entry, "9092"
        host = host.strip("[]")
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(f"bootstrap server {entry!r} has no valid port") from None
        if not host or not 0 < port < 65536:
            raise ConfigError(f"bootstrap server {entry!r} is not host:port")
        addresses.append((host, port))
    return addresses
