"""kafka-python's consumer protocol codec and assignors, imported for cross-checks.

kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated in
3.11; the suite turns warnings into errors, so the import (and any lazy schema load, see
IGNORE_KAFKA_PYTHON_WARNING) is let through here.
"""

from __future__ import annotations

import warnings

KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
IGNORE_KAFKA_PYTHON_WARNING = f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

__all__ = [
    "IGNORE_KAFKA_PYTHON_WARNING",
    "ConsumerProtocolAssignment",
    "ConsumerProtocolSubscription",
    "RangePartitionAssignor",
    "RoundRobinPartitionAssignor",
]
