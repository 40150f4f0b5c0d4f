"""The producer: partitioner, accumulator, sender logic (pure) and the Producer I/O shell."""

from strom.client.producer.accumulator import RecordMetadata
from strom.client.producer.producer import Producer

__all__ = ["Producer", "RecordMetadata"]
