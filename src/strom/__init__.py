"""strom: a Kafka-compatible streaming platform in Python."""

__version__ = "0.1.0"
