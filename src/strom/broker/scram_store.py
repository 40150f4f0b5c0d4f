"""Where the broker keeps SCRAM credentials: salted credentials only, never a password.

A single node (``FileScramStore``): ``scram-credentials.json`` of its data directory, Kafka's
per-user documents (``{"<user>": {"version": 1, "config": {"SCRAM-SHA-512": "salt=...,stored_key=...,
server_key=...,iterations=4096"}}}``), rewritten atomically (temporary file, fsync, rename, fsync of
the directory) before an alteration is answered, and read once at start.

A broker of a cluster (``ZooKeeperScramStore``): ZooKeeper, as Kafka keeps them, in
``/config/users/<user>`` (``{"version":1,"config":{"SCRAM-SHA-512":"salt=..."}}``; other keys of a
user, its quotas, are kept as they are). An alteration is written there before it is answered
(with a ``users/<user>`` change notification, as Kafka writes) and applies on this broker at once;
every broker reads the whole table at start, and again the users each change notification names
(``apply``, from the cluster thread's watch on ``/config/changes``), so a user created through one
broker can log in on the others as soon as they have seen the notification.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from strom.broker.refused import Refused
from strom.security.credentials import (
    MECHANISM_TO_CODE,
    CredentialTable,
    Deletion,
    DescribedUser,
    Upsertion,
    UserResult,
)
from strom.security.scram import MECHANISMS, SALT_BYTES, ScramCredential, salted_password
from strom.storage.files import write_file_atomically

if TYPE_CHECKING:
    from strom.broker.cluster.runtime import ClusterReplication

log = logging.getLogger("strom.broker")

SCRAM_CREDENTIALS_FILE_NAME = "scram-credentials.json"


class ScramStoreError(Exception):
    """The credentials file cannot be read; the broker does not start on a half-read table."""


class FileScramStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / SCRAM_CREDENTIALS_FILE_NAME
        self.table = CredentialTable()

    def load(self) -> None:
        if not self.path.exists():
            return
        try:
            document = json.loads(self.path.read_bytes())
            if not isinstance(document, dict):
                raise ValueError("not a JSON object")
            table = CredentialTable()
            for user, user_document in document.items():
                table.load_user_document(str(user), user_document)
        except (OSError, ValueError) as error:
            raise ScramStoreError(f"cannot read the SCRAM credentials in {self.path}: {error}") from None
        self.table = table
        log.info("loaded SCRAM credentials of %d users from %s", len(table.users), self.path)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(
            self.path, json.dumps(self.table.documents(), indent=1, sort_keys=True).encode()
        )

    async def wait_loaded(self) -> None:
        """Loaded before the listeners open."""

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.table.credential(user, mechanism)

    def describe(self, users: list[str] | None) -> list[DescribedUser]:
        return self.table.describe(users)

    async def alter(self, upsertions: list[Upsertion], deletions: list[Deletion]) -> list[UserResult]:
        # Written on the loop, before the answer: a small file, and a rare admin request (as
        # AlterConfigs writes the dynamic broker configs).
        results, changed = self.table.alter(upsertions, deletions)
        if changed:
            self.save()
        return results

    async def add_password(self, mechanism: str, user: str, password: str, iterations: int) -> None:
        """The bootstrap path (``strom broker --add-scram``), saved at once."""
        self.table.set_password(user, mechanism, password, iterations)
        self.save()


def password_upsertion(mechanism: str, user: str, password: str, iterations: int) -> Upsertion:
    """What AlterUserScramCredentials would carry for this password (a fresh salt)."""
    salt = os.urandom(SALT_BYTES)
    return Upsertion(
        user,
        MECHANISM_TO_CODE[mechanism],
        iterations,
        salt,
        salted_password(mechanism, password, salt, iterations),
    )


class ZooKeeperScramStore:
    """The credentials of a cluster's brokers, in ZooKeeper (see the module's docstring)."""

    def __init__(self, cluster: ClusterReplication) -> None:
        self._cluster = cluster
        self.table = CredentialTable()
        self._loaded = asyncio.Event()
        self._generation = 0  # notifications applied (see load)

    async def wait_loaded(self) -> None:
        """Logins that come between the listeners' opening and the first read of ZooKeeper wait for it."""
        await self._loaded.wait()

    async def load(self) -> None:
        """Every user's credentials, read again if a notification was applied meanwhile (the
        whole read must not undo a change it did not see)."""
        while True:
            generation = self._generation
            configs = await self._cluster.zookeeper(lambda zk: zk.read_user_configs(), read=True)
            if generation == self._generation:
                break
        table = CredentialTable()
        for user, config in configs.items():
            try:
                table.load_user_document(user, {"config": config})
            except ValueError as error:
                log.warning("ignoring the SCRAM credentials of user %r in ZooKeeper: %s", user, error)
        self.table = table
        self._loaded.set()

    def apply(self, users: Mapping[str, Mapping[str, str] | None]) -> None:
        """Users named by change notifications, with their configs as ZooKeeper holds them now
        (None: the user's znode is gone). Called on the event loop."""
        self._generation += 1
        for user, config in users.items():
            credentials = CredentialTable()
            if config is not None:
                try:
                    credentials.load_user_document(user, {"config": dict(config)})
                except ValueError as error:
                    log.warning("ignoring the SCRAM credentials of user %r in ZooKeeper: %s", user, error)
                    continue
            found = credentials.users.get(user)
            if found:
                self.table.users[user] = found
            else:
                self.table.users.pop(user, None)

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.table.credential(user, mechanism)

    def describe(self, users: list[str] | None) -> list[DescribedUser]:
        return self.table.describe(users)

    async def alter(self, upsertions: list[Upsertion], deletions: list[Deletion]) -> list[UserResult]:
        trial = CredentialTable(self.table.users)
        results, changed = trial.alter(upsertions, deletions)
        failed: dict[str, Refused] = {}
        for user in sorted(changed):
            changes = {
                mechanism: credential.to_text() if (credential := trial.credential(user, mechanism)) else None
                for mechanism in MECHANISMS
            }
            try:
                await self._cluster.zookeeper(lambda zk, u=user, c=changes: zk.update_user_config(u, c))  # type: ignore[misc]
            except Refused as refused:
                failed[user] = refused
        for user in changed - failed.keys():
            credentials = trial.users.get(user)
            if credentials:
                self.table.users[user] = credentials
            else:
                self.table.users.pop(user, None)
        return [
            UserResult(result.user, int(failed[result.user].error), str(failed[result.user]))
            if result.user in failed
            else result
            for result in results
        ]

    async def add_password(self, mechanism: str, user: str, password: str, iterations: int) -> None:
        [result] = await self.alter([password_upsertion(mechanism, user, password, iterations)], [])
        if result.error_code:
            raise ScramStoreError(f"--add-scram {mechanism} for {user}: {result.error_message}")
