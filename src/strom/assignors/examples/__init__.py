"""Custom assignors from seed 002, shipped as examples of the `Assignor` interface.

They are not in the built-in registry: every member of a group must offer the same name, and these
names mean nothing to librdkafka or the Java client. See docs/assignors.md.
"""

from strom.assignors.examples.copartitioned import CoPartitionedAssignor
from strom.assignors.examples.rack_aware import RackAwareAssignor
from strom.assignors.examples.redundant import RedundantAssignor

__all__ = ["CoPartitionedAssignor", "RackAwareAssignor", "RedundantAssignor"]
