"""How many files the logs may keep open and how many partitions the broker accepts, from the
process's open-files limit (the broker raises the soft limit to the hard one before asking).

Descriptors are split three ways (bounds and reasons in ``strom.base.limits``): a fixed reserve for
the broker itself, a share for open segment files (the capacity of the log manager's
``OpenFileCache``), and the rest for client connections. A partition needs its active segment
open while it is written, so the broker accepts at most as many partitions as segment files may
be open at once (and never more than ``limits.partitions_per_broker_max``): every partition can
then be written at the same time without the cache closing and reopening files on every append.
CreateTopics and CreatePartitions beyond that are refused with POLICY_VIOLATION; a data directory
that already holds more (made under a higher limit) still loads and serves, only slower.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.base import limits


@dataclass(frozen=True)
class FileBudget:
    open_files_limit: int  # the process's soft RLIMIT_NOFILE
    segment_files_max: int  # segment files open at once (the file cache's capacity)
    partitions_max: int  # partitions this broker accepts in CreateTopics / CreatePartitions

    @classmethod
    def from_open_files_limit(cls, open_files_limit: int) -> FileBudget:
        shareable = max(open_files_limit - limits.process_reserved_fds, 0)
        segment_files = max(
            shareable * limits.segment_files_share_percent // 100, limits.segment_files_open_min
        )
        partitions = min(segment_files, limits.partitions_per_broker_max)
        return cls(open_files_limit, segment_files, partitions)

    def describe(self) -> str:
        return (
            f"open files limit {self.open_files_limit}: up to {self.segment_files_max} segment files "
            f"open at once, at most {self.partitions_max} partitions"
        )
