"""SCRAM credentials of a single node, kept in ``scram-credentials.json`` of its data directory.

The file holds Kafka's per-user documents (``{"<user>": {"version": 1, "config": {"SCRAM-SHA-512":
"salt=...,stored_key=...,server_key=...,iterations=4096"}}}``): salted credentials only, never a
password. It is rewritten atomically (temporary file, fsync, rename, fsync of the directory)
before an alteration is answered, and read once at start. A broker of a cluster would keep the
same documents in ZooKeeper under ``/config/users/<user>``; that store is not written yet, so a
cluster's brokers each keep their own file (see docs/security.md).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from strom.security.credentials import (
    CredentialTable,
    Deletion,
    DescribedUser,
    Upsertion,
    UserResult,
)
from strom.security.scram import ScramCredential
from strom.storage.files import write_file_atomically

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

    def add_password(self, mechanism: str, user: str, password: str, iterations: int) -> None:
        """The bootstrap path (``strom broker --add-scram``), saved at once."""
        self.table.set_password(user, mechanism, password, iterations)
        self.save()
