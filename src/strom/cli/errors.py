"""Client errors turned into one clear line for the person at the terminal."""

from __future__ import annotations

import argparse

from strom.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

__all__ = ["describe_kafka_error"]


def describe_kafka_error(error: KafkaError, arguments: argparse.Namespace) -> str:
    bootstrap = getattr(arguments, "bootstrap_server", None)
    if isinstance(error, KafkaTimeoutError | KafkaConnectionError) and bootstrap:
        return f"cannot reach the cluster at {bootstrap}, or it did not answer in time ({error})"
    return str(error) or type(error).__name__
