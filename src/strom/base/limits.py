"""Every bound strom enforces, in one place, each with the reason beside it.

Names end with their unit. Broker configuration may lower or raise some of these per deployment
(the config key is named where it applies); the values here are the defaults and hard caps.
"""

from __future__ import annotations

# Kafka's socket.request.max.bytes default (100 MiB). A frame whose declared size exceeds the
# configured value is refused before a single byte of its body is buffered.
frame_bytes_max = 104_857_600

# Kafka's message.max.bytes default (1 MiB + overhead): the largest record batch accepted.
batch_bytes_max = 1_048_588

# The size prefix of a frame is a signed int32: anything negative or below the smallest request
# header (api key, api version, correlation id = 8 bytes) is malformed.
frame_bytes_min = 8

# Requests one connection may have in flight before the broker stops reading from it; bounds the
# memory a single pipelining client can pin. librdkafka pipelines up to 1,000,000 by default but
# in practice sends a handful.
pending_requests_per_connection_max = 1_000

# Strings in the protocol are at most int16 long; compact strings could be longer, Kafka caps at
# 32767 for everything that is a name.
topic_name_chars_max = 249

# A record batch on the v2 format: 61 bytes of header before the first record.
record_batch_header_bytes = 61

# Largest decompressed size accepted for one batch, so a zip bomb cannot exhaust memory.
decompressed_batch_bytes_max = 256 * 1024 * 1024

# Culprit records a refused produce lists per partition (record_errors, Produce v8+): Kafka lists
# every one, which for a batch of a million keyless records sent to a compacted topic is a response
# of tens of megabytes; the first thousand say as much.
produce_record_errors_max = 1_000

# Record layouts whose check plans the produce validator keeps (twice: by layout and by a guess
# from a record's first and last bytes). A plan holds up to ~70 KiB (its offset delta table); a
# producer's batches come in a handful of layouts, and a forgotten one is rebuilt in microseconds.
record_layouts_cached_max = 64

# Partitions in one topic: bounded so a typo in CreateTopics cannot create a million directories.
partitions_per_topic_max = 10_000

# Long-poll fetches wait at most this long regardless of what the client asks for.
fetch_max_wait_ms_max = 60_000

# Members (joined plus pending) one consumer group may hold whatever group.max.size says: every member
# keeps its subscription and assignment in memory and in the group's __consumer_offsets record.
group_members_max = 100_000

# Protocols (assignors) one JoinGroup may offer: clients offer a handful; each is kept per member.
member_protocols_max = 64

# Times cooperative-sticky recomputes its target from the target's own uncontested part, looking for
# a target the follow-up rebalance reproduces. Random groups settle within two recomputations; the
# bound only stops a pathological group from keeping the leader busy (it then still assigns safely:
# nothing is handed out while another member holds it).
cooperative_target_rounds_max = 8

# Fetched bytes a consumer holds for the application across all its partitions (it also holds at
# most max.partition.fetch.bytes more per partition than one fetch, and fetch.max.bytes if lower
# bounds this): fetching ahead overlaps the broker's work with the application's, but decoded
# records take about three times their fetched size in memory.
consumer_buffered_bytes_max = 256 * 1024 * 1024
