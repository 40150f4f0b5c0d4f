"""The keys of the transaction coordinator's timers (one ``Timer`` may serve both coordinators:
every key here starts with ``txn/``, none of the group coordinator's does)."""

from __future__ import annotations


def abort_timed_out_key() -> str:
    return "txn/abort-timed-out"


def expire_transactional_ids_key() -> str:
    return "txn/expire-transactional-ids"


def markers_key(transactional_id: str) -> str:
    """A transaction's next marker round, or its Complete record written again, after a backoff."""
    return f"txn/markers/{transactional_id}"
