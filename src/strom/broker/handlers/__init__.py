"""One module per API. Importing a module registers its handler in ``strom.broker.registry``."""

from __future__ import annotations

from strom.broker.handlers import api_versions

__all__ = ["api_versions", "register_all"]


def register_all() -> None:
    """Import every handler module (each registers itself once, at import)."""
    from strom.broker.handlers import (  # noqa: F401
        acls,
        client_quotas,
        cluster,
        configs,
        consumer_groups,
        fetch,
        group_history,
        groups,
        list_offsets,
        log_dirs,
        metadata,
        produce,
        producer_ids,
        producers,
        records,
        replication,
        sasl,
        scram_credentials,
        topics,
        transactions,
    )
