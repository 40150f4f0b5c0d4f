"""strom: a Kafka-compatible streaming platform in Python."""

__version__ = "0.1.0"

from typing import Any

__all__ = ["Admin", "Consumer", "Producer", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so importing strom.protocol or the broker does not load the client and asyncio.
    if name == "Producer":
        from strom.client.producer import Producer

        return Producer
    if name == "Consumer":
        from strom.client.consumer import Consumer

        return Consumer
    if name == "Admin":
        from strom.client.admin import Admin

        return Admin
    raise AttributeError(f"module 'strom' has no attribute {name!r}")
