"""Where group configs (KIP-848, ``strom.coordinator.group_configs``) outlive the broker, and how
a change reaches the group coordinator.

A single node keeps them in the data directory (``group_configs.json``, written atomically before
the change applies, loaded at start: a file strom cannot read stops the start, as the quota file
does). A broker of a cluster keeps them in ZooKeeper (``/config/groups/<group>``, with a change
notification every broker reads them again on): the cluster runtime sets its store here and hands
over what ZooKeeper holds (``replace_all``, ``update``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from strom.coordinator.config import CoordinatorConfig
from strom.coordinator.group_configs import GroupConfigError, check_group_configs
from strom.storage.files import write_file_atomically

log = logging.getLogger("strom.broker")

GROUP_CONFIGS_FILE_NAME = "group_configs.json"
_FILE_VERSION = 1

# Group id -> its overrides, Kafka's names, the values as given (text, as Kafka keeps them).
GroupConfigs = dict[str, dict[str, str]]


class GroupConfigFileError(ValueError):
    """The group config file is there but strom cannot read it: the broker does not start."""


class GroupConfigStoreError(Exception):
    """The store could not keep a change (ZooKeeper failed); the message says why."""


class GroupConfigStore(Protocol):
    def load(self) -> GroupConfigs: ...

    async def save(self, group_id: str, values: Mapping[str, str]) -> None:
        """Make ``values`` the group's configs (none: remove them), durably, before returning."""
        ...


class FileGroupConfigStore:
    """One JSON document in the data directory:
    ``{"version": 1, "groups": {"<group id>": {"consumer.session.timeout.ms": "50000"}}}``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / GROUP_CONFIGS_FILE_NAME
        self._configs: GroupConfigs = {}

    def load(self) -> GroupConfigs:
        if not self.path.exists():
            self._configs = {}
            return {}
        try:
            document = json.loads(self.path.read_bytes())
            if document.get("version") != _FILE_VERSION:
                raise ValueError(f"version {document.get('version')!r}, expected {_FILE_VERSION}")
            configs: GroupConfigs = {}
            for group_id, values in document["groups"].items():
                if not isinstance(values, dict):
                    raise ValueError(f"the configs of group {group_id!r} are not an object")
                configs[str(group_id)] = {str(key): str(value) for key, value in values.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise GroupConfigFileError(
                f"{self.path} is not a group config file strom can read: {error}"
            ) from None
        self._configs = configs
        return {group_id: dict(values) for group_id, values in configs.items()}

    async def save(self, group_id: str, values: Mapping[str, str]) -> None:
        configs = dict(self._configs)
        if values:
            configs[group_id] = dict(values)
        else:
            configs.pop(group_id, None)
        document: dict[str, Any] = {
            "version": _FILE_VERSION,
            "groups": {name: dict(sorted(configs[name].items())) for name in sorted(configs)},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(self.path, json.dumps(document, indent=1).encode())
        self._configs = configs


class BrokerGroupConfigs:
    """The broker's group configs: what its store holds, handed to the group coordinator
    (``apply(group_id, checked values)``) as they change."""

    def __init__(
        self,
        data_dir: Path,
        coordinator_config: CoordinatorConfig,
        apply: Callable[[str, Mapping[str, int]], None],
    ) -> None:
        self.store: GroupConfigStore = FileGroupConfigStore(data_dir)
        # The broker's group.consumer.* settings: the defaults and the bounds of group configs.
        self.coordinator_config = coordinator_config
        self._apply = apply
        self._configs: GroupConfigs = {}

    def load(self) -> None:
        """A single node, at start: the data directory's group configs."""
        self.replace_all(self.store.load())
        if self._configs:
            log.info("group configs loaded for %d groups", len(self._configs))

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._configs.get(group_id, {}))

    async def set_group(
        self, group_id: str, values: Mapping[str, str], *, validate_only: bool = False
    ) -> None:
        """Check (GroupConfigError), then unless ``validate_only`` persist and apply at once (to
        each member's next heartbeat)."""
        checked = check_group_configs(values, self.coordinator_config)
        if validate_only:
            return
        kept = {name: str(value) for name, value in checked.items()}  # " 50000" is kept as 50000
        await self.store.save(group_id, kept)
        self._set(group_id, kept, checked)

    def replace_all(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Every group's configs as the store now has them (a broker joining its cluster)."""
        for group_id in set(self._configs) - set(configs):
            self._set(group_id, {}, {})
        self.update(configs)

    def update(self, changes: Mapping[str, Mapping[str, str]]) -> None:
        """Some groups' configs as the store now has them (empty: removed). A key strom does not
        have or a value that is not a number (written by something else) is left out, with a
        warning; a value outside the broker's bounds as they are now is kept, and held to them."""
        config = self.coordinator_config
        for group_id, values in changes.items():
            kept: dict[str, str] = {}
            checked: dict[str, int] = {}
            for name, value in values.items():
                try:
                    checked.update(check_group_configs({name: value}, config, within_bounds=False))
                except GroupConfigError as error:
                    log.warning("ignoring a group config of %r: %s", group_id, error)
                    continue
                kept[name] = value
            self._set(group_id, kept, checked)

    def _set(self, group_id: str, values: dict[str, str], checked: Mapping[str, int]) -> None:
        if values:
            self._configs[group_id] = values
        else:
            self._configs.pop(group_id, None)
        self._apply(group_id, checked)
