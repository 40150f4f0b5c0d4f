"""DescribeConfigs 0-4, AlterConfigs 0-2 and IncrementalAlterConfigs 0-1 for topics, for the
broker, and for groups (KIP-848's group configs).

BROKER resources are named by node id (this broker) or "" (the cluster-wide default). Their
dynamic keys (``DYNAMIC_BROKER_CONFIG_KEYS``: the broker-level defaults of topic configs) can be
altered: the new layer is validated, persisted in the data directory, and applied at once to every
topic that does not override the key. Every other broker key is read-only and refused with
INVALID_REQUEST, as Kafka refuses a config it "cannot update dynamically".

GROUP resources are named by group id, whether the group exists or not: its overrides of
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` (``strom.coordinator.
group_configs``), checked against the broker's bounds, kept (``strom.broker.group_configs``) and
given to the group's members from their next heartbeat.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from strom.broker.authorization import allowed, cluster_allowed, topic_allowed
from strom.broker.config import (
    BROKER_CONFIG_KEYS,
    DYNAMIC_BROKER_CONFIG_KEYS,
    UNUSED_DYNAMIC_KAFKA_KEYS,
    BrokerConfig,
    BrokerConfigError,
    DynamicConfigs,
    save_dynamic_configs,
)
from strom.broker.context import RequestContext
from strom.broker.group_configs import GroupConfigStoreError
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.broker.state import BrokerState
from strom.broker.topic_configs import (
    CONFIG_TYPES,
    SOURCE_DEFAULT,
    ConfigEntry,
    broker_config_entries,
    cluster_default_config_entries,
    topic_config_entries,
)
from strom.coordinator.group_configs import GROUP_CONFIG_KEYS, GroupConfigError
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from strom.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from strom.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from strom.security.acl import Authorizer, ResourceType
from strom.storage import TOPIC_CONFIG_KEYS, ConfigError, LogConfig, StorageError, UnknownTopicError

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
# DescribeConfigs' ConfigSource of a group's own config (Kafka's GROUP_CONFIG).
SOURCE_GROUP = 8
OPERATION_SET = 0
OPERATION_DELETE = 1
OPERATION_APPEND = 2
OPERATION_SUBTRACT = 3
LIST_KEYS = frozenset({"cleanup.policy", "log.cleanup.policy"})
CLUSTER_DEFAULT_NAME = ""


def _check_authorized(
    authorizer: Authorizer | None,
    context: RequestContext,
    resource_type: int,
    name: str,
    operation: AclOperation,
) -> None:
    """With authorization on (``authorizer``: the broker's, read once per request):
    ``operation`` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on the topic, or on the cluster for a BROKER
    resource, as Kafka checks it."""
    if authorizer is None:
        return
    if resource_type == RESOURCE_TOPIC and not topic_allowed(context, operation, name):
        raise Refused(
            ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized for the configs of topic '{name}'"
        )
    if resource_type == RESOURCE_BROKER and not cluster_allowed(context, operation):
        raise Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized for the broker's configs")
    if resource_type == RESOURCE_GROUP and not allowed(context, operation, ResourceType.GROUP, name):
        raise Refused(
            ErrorCode.GROUP_AUTHORIZATION_FAILED, f"not authorized for the configs of group '{name}'"
        )


def _check_broker_name(state: BrokerState, name: str) -> None:
    if name not in (CLUSTER_DEFAULT_NAME, str(state.node_id)):
        raise Refused(ErrorCode.INVALID_REQUEST, f"this is broker {state.node_id}, not '{name}'")


async def _entries(state: BrokerState, resource_type: int, name: str) -> list[ConfigEntry]:
    if resource_type == RESOURCE_TOPIC:
        topic = await state.replication.topic_config(name)
        if topic is None:
            raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        return topic_config_entries(state, topic)
    if resource_type == RESOURCE_BROKER:
        _check_broker_name(state, name)
        if name == CLUSTER_DEFAULT_NAME:
            return cluster_default_config_entries(state)
        return broker_config_entries(state)
    if resource_type == RESOURCE_GROUP:
        _check_group_name(name)
        return _group_config_entries(state, name)
    raise Refused(ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported")


@handles(DescribeConfigsRequest, DescribeConfigsResponse, 0, 4)
async def handle_describe_configs(
    context: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    version = context.api_version
    authorizer = context.broker.authorizer
    results: list[DescribeConfigsResponse.DescribeConfigsResult] = []
    for resource in request.resources:
        result = DescribeConfigsResponse.DescribeConfigsResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name, error_message=None
        )
        results.append(result)
        try:
            _check_authorized(
                authorizer,
                context,
                resource.resource_type,
                resource.resource_name,
                AclOperation.DESCRIBE_CONFIGS,
            )
            entries = await _entries(context.broker, resource.resource_type, resource.resource_name)
        except Refused as refused:
            result.error_code = refused.error
            result.error_message = refused.message
            continue
        # Null and empty both mean every key, as Kafka reads the filter.
        wanted = set(resource.configuration_keys) if resource.configuration_keys else None
        for entry in entries:
            if wanted is not None and entry.name not in wanted:
                continue
            config = DescribeConfigsResponse.DescribeConfigsResourceResult(
                name=entry.name, value=entry.value, read_only=entry.read_only, is_sensitive=False
            )
            if version == 0:
                config.is_default = entry.source == SOURCE_DEFAULT
            else:
                config.config_source = entry.source
                if request.include_synonyms:
                    config.synonyms = [
                        DescribeConfigsResponse.DescribeConfigsSynonym(name=name, value=value, source=source)
                        for name, value, source in entry.synonyms
                    ]
            if version >= 3:
                config.config_type = entry.config_type
                config.documentation = entry.documentation if request.include_documentation else None
            result.configs.append(config)
    return DescribeConfigsResponse(results=results)


# -- topics -----------------------------------------------------------------------------------


async def _apply_topic_overrides(
    state: BrokerState, name: str, overrides: Mapping[str, str], validate_only: bool
) -> None:
    topic = await state.replication.topic_config(name)
    if topic is None:
        raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
    unknown = sorted(set(overrides) - set(TOPIC_CONFIG_KEYS))
    if unknown:
        raise Refused(ErrorCode.INVALID_CONFIG, f"unknown topic config(s): {', '.join(unknown)}")
    try:
        LogConfig.from_properties(overrides, base=state.config.log_defaults())
        if not validate_only:
            await state.replication.alter_topic_config(name, overrides)
    except ConfigError as error:
        raise Refused(ErrorCode.INVALID_CONFIG, str(error)) from None
    except UnknownTopicError as error:  # deleted while the change was being written
        raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(error)) from None
    except StorageError as error:
        raise Refused(ErrorCode.KAFKA_STORAGE_ERROR, str(error)) from None


async def _topic_incremental(
    state: BrokerState, name: str, configs: list[IncrementalAlterConfigsRequest.AlterableConfig]
) -> dict[str, str]:
    topic = await state.replication.topic_config(name)
    if topic is None:
        raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
    overrides = dict(topic.overrides)
    effective = topic.config.to_properties()
    for config in configs:
        _incremental(overrides, effective, config)
    return overrides


# -- the broker -------------------------------------------------------------------------------


def _dynamic_layer(config: BrokerConfig, name: str) -> dict[str, str]:
    return dict(config.dynamic_default if name == CLUSTER_DEFAULT_NAME else config.dynamic_broker)


def _check_dynamic_keys(keys: Iterable[str], name: str) -> None:
    """The keys may be changed on the broker resource ``name`` (this broker, or "" the cluster-wide
    default): strom's dynamic keys, and Kafka's dynamic keys strom does not use (kept, no effect)
    where Kafka allows them (a per-broker one not on the cluster-wide default)."""
    names = set(keys)
    unused = names & set(UNUSED_DYNAMIC_KAFKA_KEYS)
    per_broker = sorted(key for key in unused if UNUSED_DYNAMIC_KAFKA_KEYS[key] == "per-broker")
    if name == CLUSTER_DEFAULT_NAME and per_broker:
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            f"cannot update these configs at default cluster level, broker id must be specified: "
            f"{', '.join(per_broker)}",
        )
    names -= unused
    unknown = sorted(names - set(BROKER_CONFIG_KEYS))
    if unknown:
        raise Refused(ErrorCode.INVALID_REQUEST, f"unknown broker config(s): {', '.join(unknown)}")
    read_only = sorted(names - DYNAMIC_BROKER_CONFIG_KEYS)
    if read_only:
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            f"cannot update these configs dynamically: {', '.join(read_only)} "
            "(set them with --config or --set and restart)",
        )


def _apply_broker_layer(state: BrokerState, name: str, layer: Mapping[str, str], validate_only: bool) -> None:
    """Replace the dynamic layer ``name`` names (this broker or the cluster-wide default) with
    ``layer``: validated, persisted, then applied to every topic it changes."""
    _check_broker_name(state, name)
    _check_dynamic_keys(layer, name)
    current = state.config
    dynamic_default = layer if name == CLUSTER_DEFAULT_NAME else current.dynamic_default
    dynamic_broker = current.dynamic_broker if name == CLUSTER_DEFAULT_NAME else layer
    try:
        candidate = current.with_dynamic(dynamic_default, dynamic_broker)
    except BrokerConfigError as error:
        raise Refused(
            ErrorCode.INVALID_REQUEST, f"invalid config value for broker '{name}': {error}"
        ) from None
    if validate_only:
        return
    try:
        save_dynamic_configs(
            state.config.data_dir,
            state.node_id,
            DynamicConfigs(default=candidate.dynamic_default, broker=candidate.dynamic_broker),
        )
    except OSError as error:
        raise Refused(
            ErrorCode.KAFKA_STORAGE_ERROR, f"cannot keep the broker configuration: {error}"
        ) from None
    state.config = candidate
    state.logs.set_default_config(candidate.log_defaults())


# -- groups -----------------------------------------------------------------------------------


def _check_group_name(name: str) -> None:
    if not name:
        raise Refused(ErrorCode.INVALID_REQUEST, "a group config resource needs a group id")


def _group_config_entries(state: BrokerState, group_id: str) -> list[ConfigEntry]:
    """Each group config: the group's own value (source GROUP_CONFIG), else the broker's."""
    overrides = state.group_configs.overrides(group_id)
    coordinator_config = state.group_configs.coordinator_config
    entries: list[ConfigEntry] = []
    for name, key in sorted(GROUP_CONFIG_KEYS.items()):
        default = str(key.default(coordinator_config))
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], SOURCE_GROUP))
        synonyms.append((key.default_key, default, SOURCE_DEFAULT))
        entries.append(
            ConfigEntry(
                name=name,
                value=overrides.get(name, default),
                read_only=False,
                source=SOURCE_GROUP if name in overrides else SOURCE_DEFAULT,
                config_type=CONFIG_TYPES["int"],
                documentation=key.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


async def _apply_group_configs(
    state: BrokerState, group_id: str, values: Mapping[str, str], validate_only: bool
) -> None:
    """Make ``values`` the group's configs (replacing all of them): checked, kept, applied."""
    _check_group_name(group_id)
    try:
        await state.group_configs.set_group(group_id, values, validate_only=validate_only)
    except GroupConfigError as error:
        raise Refused(ErrorCode.INVALID_CONFIG, str(error)) from None
    except OSError as error:
        raise Refused(
            ErrorCode.KAFKA_STORAGE_ERROR, f"the group configs could not be saved: {error}"
        ) from None
    except GroupConfigStoreError as error:
        raise Refused(
            ErrorCode.UNKNOWN_SERVER_ERROR, f"the group configs could not be saved: {error}"
        ) from None


def _check_resource_type(resource_type: int) -> None:
    if resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP):
        raise Refused(ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported")


@handles(AlterConfigsRequest, AlterConfigsResponse, 0, 2)
async def handle_alter_configs(context: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    """Non-incremental: the given set replaces every override of the topic, or every dynamic
    config of the broker resource."""
    state = context.broker
    authorizer = state.authorizer
    responses: list[AlterConfigsResponse.AlterConfigsResourceResponse] = []
    for resource in request.resources:
        response = AlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name, error_message=None
        )
        responses.append(response)
        try:
            _check_resource_type(resource.resource_type)
            _check_authorized(
                authorizer,
                context,
                resource.resource_type,
                resource.resource_name,
                AclOperation.ALTER_CONFIGS,
            )
            values = {entry.name: entry.value for entry in resource.configs if entry.value is not None}
            if resource.resource_type == RESOURCE_BROKER:
                _apply_broker_layer(state, resource.resource_name, values, request.validate_only)
            elif resource.resource_type == RESOURCE_GROUP:
                await _apply_group_configs(state, resource.resource_name, values, request.validate_only)
            else:
                await _apply_topic_overrides(state, resource.resource_name, values, request.validate_only)
        except Refused as refused:
            response.error_code = refused.error
            response.error_message = refused.message
    return AlterConfigsResponse(responses=responses)


def _incremental(
    current: dict[str, str],
    effective: Mapping[str, str],
    config: IncrementalAlterConfigsRequest.AlterableConfig,
) -> None:
    """Apply one operation to the overrides ``current``; APPEND/SUBTRACT start from the value in
    force (``effective``), default included, as Kafka does."""
    name, value = config.name, config.value
    if config.config_operation == OPERATION_SET:
        if value is None:
            raise Refused(ErrorCode.INVALID_CONFIG, f"SET of {name} needs a value")
        current[name] = value
    elif config.config_operation == OPERATION_DELETE:
        current.pop(name, None)
    elif config.config_operation in (OPERATION_APPEND, OPERATION_SUBTRACT):
        if name not in LIST_KEYS:
            raise Refused(ErrorCode.INVALID_CONFIG, f"{name} is not a list; APPEND/SUBTRACT do not apply")
        items = [item for item in current.get(name, effective.get(name, "")).split(",") if item]
        for item in (value or "").split(","):
            if not item:
                continue
            if config.config_operation == OPERATION_APPEND and item not in items:
                items.append(item)
            elif config.config_operation == OPERATION_SUBTRACT and item in items:
                items.remove(item)
        current[name] = ",".join(items)
    else:
        raise Refused(ErrorCode.INVALID_REQUEST, f"unknown config operation {config.config_operation}")


@handles(IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1)
async def handle_incremental_alter_configs(
    context: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    state = context.broker
    authorizer = state.authorizer
    responses: list[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse] = []
    for resource in request.resources:
        response = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name, error_message=None
        )
        responses.append(response)
        try:
            _check_resource_type(resource.resource_type)
            name = resource.resource_name
            _check_authorized(authorizer, context, resource.resource_type, name, AclOperation.ALTER_CONFIGS)
            if resource.resource_type == RESOURCE_BROKER:
                _check_broker_name(state, name)
                _check_dynamic_keys((config.name for config in resource.configs), name)
                layer = _dynamic_layer(state.config, name)
                effective = {key: state.config.raw(key) for key in BROKER_CONFIG_KEYS}
                for config in resource.configs:
                    _incremental(layer, effective, config)
                _apply_broker_layer(state, name, layer, request.validate_only)
            elif resource.resource_type == RESOURCE_GROUP:
                current = state.group_configs.overrides(name)
                for config in resource.configs:
                    if config.config_operation in (OPERATION_APPEND, OPERATION_SUBTRACT):
                        raise Refused(
                            ErrorCode.INVALID_CONFIG,
                            f"{config.name} is not a list; APPEND/SUBTRACT do not apply",
                        )
                    _incremental(current, {}, config)
                await _apply_group_configs(state, name, current, request.validate_only)
            else:
                overrides = await _topic_incremental(state, name, resource.configs)
                await _apply_topic_overrides(state, name, overrides, request.validate_only)
        except Refused as refused:
            response.error_code = refused.error
            response.error_message = refused.message
    return IncrementalAlterConfigsResponse(responses=responses)
