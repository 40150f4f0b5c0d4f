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

# Requests of one connection cut from its byte stream and not yet answered: the broker takes at
# most this many from what it has read before answering them, and reads no more of the connection
# until they are answered, so a pipelining client is held back by TCP, not by our memory (a batch
# of tiny requests is also bounded in bytes by the read size). librdkafka pipelines up to 1,000,000
# by default but in practice sends a handful; 1,000 keeps a burst of heartbeats cheap to answer.
pending_requests_per_connection_max = 1_000

# Answers one connection may have made and not yet handed to the kernel before the broker stops
# reading from it (Kafka mutes the channel), and the level it must drain to before being read
# again. A peer that pipelines Fetches and never reads pins at most this much (plus one batch), and
# a Fetch answer is cut to what is left of it: 32 MiB is larger than what consumers ask for in
# one fetch by default (librdkafka, the Java client: 50 MiB across all partitions, 1 MiB per
# partition), so well-behaved consumers never notice it.
connection_unsent_bytes_max = 32 * 1024 * 1024
connection_unsent_bytes_resume = 8 * 1024 * 1024

# Unsent answers plus received and unanswered request bytes of all connections together: above
# this, every connection holding more than ``connection_held_bytes_reserved`` stops being read
# until it is back under that reserve, and Fetch answers shrink to what is left of the budget. A
# connection within the reserve (heartbeats, metadata, a consumer keeping up) is always served.
# The total is up to date for connections above the reserve and refreshed by the periodic
# connection check for the others; it can be overrun by one partly received request per connection
# (at most socket.request.max.bytes each, for at most request_receive_ms_max) and by the reserve.
broker_held_bytes_max = 256 * 1024 * 1024
connection_held_bytes_reserved = 1024 * 1024

# The bytes of one request must all arrive within this long (counted while the broker is reading
# the connection), else the connection is closed: a peer trickling a frame a byte at a time
# (slowloris) would otherwise pin its buffer and its socket forever while never looking idle.
# 30 s is Kafka's request.timeout.ms default: by then the client has given up on the request
# anyway. The bound is never longer than connections.max.idle.ms.
request_receive_ms_max = 30_000

# How often connections are looked over for idleness and slow requests; closing happens within
# this long after the bound (a tenth of the shortest bound when that is shorter).
connection_check_interval_ms_max = 1_000

# Strings in the protocol are at most int16 long; compact strings could be longer, Kafka caps at
# 32767 for everything that is a name.
topic_name_chars_max = 249

# A record batch on the v2 format: 61 bytes of header before the first record.
record_batch_header_bytes = 61

# Largest decompressed size accepted for one batch, so a zip bomb cannot exhaust memory.
decompressed_batch_bytes_max = 256 * 1024 * 1024

# ---- produce validation off the event loop (see strom.broker.produce_validation) ---------------
# Checking a produced batch costs about its decompressed size in bytes and its record count in
# vector steps (up to ~0.5 µs a record for records of varied layouts, and gzip inflates at a few
# hundred MB/s): a batch that decompresses to the cap held the loop for seconds. A partition's
# records are checked on the loop only while they stay within both bounds below; anything larger
# is checked in a worker thread while the loop serves everyone else. The bounds keep the work done
# on the loop to a few milliseconds (below ``loop_stall_warning_ms`` on the loaded 2-core test
# machine) and above what producers batch by default (librdkafka: batch.size 1,000,000 bytes;
# Java clients and kafka-python: 16 KiB), so their batches take no thread hop.
produce_validation_inline_bytes_max = 2 * 1024 * 1024
produce_validation_inline_records_max = 16_384
# Threads that check the larger batches: the machine's two cores (codecs and numpy release the
# GIL for most of the work).
produce_validation_threads = 2
# Decompressed bytes those threads may hold at once. A compressed batch reserves the cap
# (``decompressed_batch_bytes_max``: what it may decompress to) before it decompresses and keeps
# what it really decompressed to until it is checked; a batch that finds the budget spent waits
# for it. One batch at the cap and room for others beside it: two zip bombs are not decompressed at
# once. (Joining the decompressed pieces briefly needs as much again.)
produce_validation_bytes_in_flight_max = decompressed_batch_bytes_max + 128 * 1024 * 1024

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

# Partition views a single-node broker keeps built for its Metadata answers (every partition is
# described alike there, so a topic's are built once and shared): a few MiB at ~150 B a view, and
# twice the most one topic may have, so the largest topic's are always kept.
single_node_partition_views_cached_max = 2 * partitions_per_topic_max

# ZooKeeper refuses a znode larger than its jute.maxbuffer (1 MiB - 1 by default); strom checks
# before writing so an oversized topic assignment fails with a clear error, not a lost connection.
znode_bytes_max = 1_048_575

# ZooKeeper requests one pipelined batch keeps outstanding (a new controller reading every
# partition state, or writing a thousand elections): enough to hide the round trips, few enough
# that the client's queue and the server's throttle stay small.
zookeeper_requests_in_flight_max = 1_000

# A cluster broker that has not yet heard the controller's first UpdateMetadata (it has just
# started, and the controller is busy or being elected) holds a Metadata request at most this long
# before answering from what it knows (clients' requests time out after 30-60 s).
metadata_wait_ms = 5_000
# Long-poll fetches wait at most this long regardless of what the client asks for.
fetch_max_wait_ms_max = 60_000
# Incremental fetch sessions (strom.broker.fetch_sessions): at most this many sessions (Kafka's
# max.incremental.fetch.session.cache.slots default) and partitions in all of them (a follower's
# session holds every partition it follows from this broker: this is partitions_per_broker_max
# times a few followers), and a session unused this long may be dropped for a new one (Kafka's
# min.incremental.fetch.session.eviction.ms).
fetch_session_cache_slots = 1_000
fetch_session_partitions_max = 100_000
fetch_session_eviction_ms = 120_000

# /metrics: the families that grow with the data are bounded, because the page is built at every
# scrape and every series costs the scraper and its storage too. Past a bound the rest is
# summarised under a label that is no topic name, so sums stay exact:
# - topics with their own traffic counters (bytes and messages in/out, produce and fetch requests,
#   failed ones; 8 series each); later topics are counted together as topic="(other)";
metrics_topics_max = 1_000
# - partitions with their own log size and offset series (3 each), whole topics in name order;
#   later topics, and internal topics always, get one log size series as partition="(all)";
metrics_partitions_max = 2_000
# - (group, partition) committed offset and lag series (2 each), whole groups in name order;
#   later groups get one lag series per topic as partition="(all)".
metrics_group_partitions_max = 5_000
# With these the page holds at most about 8 x 1,001 + 3 x 2,000 + 2 x 5,000 = 24,000 series that
# follow the data, plus one per summarised topic and (group, topic), one member gauge per group,
# and about 30 per request name and 60 fixed ones.

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

# Partitions in one DescribeTopicPartitions response, whatever the client asks (Kafka's
# max.request.partition.size.limit default): a client pages through bigger clusters with the cursor.
partitions_per_describe_response_max = 2000

# Warnings about a peer's faults (malformed frames, oversize requests, slow or silent connections)
# the broker writes: a burst of this many at once, then this many per second on average. Enough to
# see what a broken client does; a fuzzer or a client retrying in a loop cannot fill the disk.
peer_fault_log_lines_burst = 50
peer_fault_log_lines_per_s = 5

# ---- file descriptors and partitions (see strom.storage.budget) ----------------------------------
# The broker raises its soft RLIMIT_NOFILE to the hard limit at start and splits what it gets.

# Descriptors kept aside for the broker itself, whatever else it does: stdin/stdout/stderr, the
# event loop (epoll, wake-up pipe), the listening and metrics sockets, the data-directory lock, the
# worker threads' short-lived files (topic, partition, snapshot and index files being written,
# directories being fsynced) and the few segment files pinned beyond the file cache's capacity
# while a thread uses them.
process_reserved_fds = 64

# Share of the remaining descriptors that open segment files may hold at once. The rest is left to
# client connections (one descriptor each): a broker whose partitions are all busy must still
# accept clients, and many clients must not leave the logs without descriptors. (Kafka keeps every
# segment of every partition open and asks operators for a limit of 100,000 or more; strom closes
# the least recently used segment files instead, so its needs do not grow with the log.)
segment_files_share_percent = 50

# Segment files that may be open at once whatever the descriptor limit: an append that rolls pins
# two, and a read, an fsync and a compaction may each pin one meanwhile.
segment_files_open_min = 16

# Partitions one broker holds at most, whatever its descriptor limit: each costs memory (a log
# object, its segments' in-memory indexes), a directory, and time at every start (its active
# segment is validated batch by batch). Kafka's long-standing guidance is a few thousand partitions
# per broker; strom loads ~0.5 ms a small partition on the 2-core test machine (5,000 in 2.3-3 s),
# so 20,000 start in about 10 s.
partitions_per_broker_max = 20_000

# Longest the broker's event loop should be kept from serving others by any one piece of work
# (admin file work, compaction and fsync run in worker threads so that it is not); a longer stall
# is logged as a warning (strom.broker.loop_lag). Clients notice stalls of this order as latency.
loop_stall_warning_ms = 50

# Creates of at least this many partitions pause the cyclic garbage collector while their logs are
# built and then freeze every live object out of its reach (a full collection over thousands of new
# logs stalled all clients for ~150 ms). Freezing also keeps whatever cyclic garbage exists at that
# moment forever, so small creates, whose collection costs little, do not freeze.
partitions_frozen_from_collector_min = 256

# Authorization decisions the ACL authorizer keeps cached (one entry per principal, host,
# operation and resource asked about; emptied on every ACL change). A client working on a few
# thousand partitions' topics and groups fits many times over; past the bound the cache is emptied
# and refills, so a principal sweeping millions of names costs memory of this size at most.
acl_decisions_cached_max = 100_000

# ACL bindings one CreateAcls request or one broker holds at most: each is kept in memory,
# indexed, and written to the ACL file (or ZooKeeper) whole on every change. Kafka deployments
# hold thousands; the 10,000 of the benchmark fit with room to spare.
acl_bindings_max = 100_000
# Client quotas (strom.security.quotas). Which quota applies to a (user, client id) is cached; a
# client that makes up a new client id per connection must not grow the cache without end, so it
# is emptied when it reaches this many entries (refilling it costs eight dict lookups per pair).
quota_resolutions_cached_max = 100_000
# A quota group (one allowance: its rate and metrics) unused for this long is forgotten, as Kafka
# expires its quota sensors after an hour of inactivity; groups are looked over this often.
quota_group_idle_ms_max = 3_600_000
quota_group_sweep_interval_ms = 60_000
# Quota groups shown on /metrics (strom_quota_*): those that were charged the most, so a client
# making up client ids cannot grow the page without end (groups also expire after an hour idle).
metrics_quota_groups_max = 500
# A TLS client must finish its handshake within this long (SSL and SASL_SSL listeners): a peer that
# connects and stalls (or speaks plaintext and waits for an answer) holds a socket no longer.
# Kafka has no such bound of its own (its idle timeout applies); 10 s is ample on any network.
tls_handshake_ms_max = 10_000

# The consumer group protocol (KIP-848): a member's subscription as a heartbeat carries it. Topic
# names are at most 249 characters; a member naming more topics than a cluster usually holds is
# refused INVALID_REQUEST rather than kept per member in memory and in its group record.
consumer_subscribed_topics_max = 10_000
# A subscription regex is compiled and matched (fullmatch) against every topic name on the broker's
# loop: a bounded length bounds the compile and keeps a member from storing a megabyte of pattern
# in every record of its group. Kafka's patterns (RE2) are a line or two.
consumer_subscription_regex_chars_max = 1_000
# A consumer-protocol member's own identifiers (member id, instance id, rack id, server assignor):
# clients send UUIDs and short names; each is kept per member in memory and in the member's record,
# so one of a megabyte (the wire allows 32 KiB strings times several fields) is refused.
consumer_member_identifier_chars_max = 1_000

# ---- the web console (strom.console) ------------------------------------------------------------
# The console answers one HTTP request per connection (Connection: close). A browser's request
# line and headers are 1-2 KiB (cookies aside; the console sets one of ~70 bytes, and only under
# --console-login); 16 KiB leaves room and is still nothing to hold. A longer head is refused
# with 431 before more is read.
console_request_head_bytes_max = 16_384
# A POSTed form: the largest is a topic's creation with its configs, a few KiB. Refused with 413
# from its Content-Length, before a byte of it is buffered.
console_form_bytes_max = 65_536
# The whole request (head and body) must arrive within this long, and the answer must be taken
# within the second bound: a peer trickling bytes (slowloris) or never reading cannot pin a
# connection. A page's own work is bounded by the client's request.timeout.ms.
console_request_receive_ms_max = 10_000
console_response_send_ms_max = 30_000
# Connections open at once; one more is answered 503 at once and closed. A person with a few tabs
# open and the test suite's browser need a handful; the bound keeps a script from holding sockets.
console_connections_max = 64
# Threads that run the pages (cluster requests and rendering, off the event loop: beside a broker
# the loop is the broker's). Two: one slow page does not hold up the next; more would only contend
# for the interpreter on the 2-core machines strom is tested on.
console_worker_threads = 2
# Rows of one page of a list (topics, groups, a topic's partitions, a group's partitions, the
# cluster page's under-replicated and offline partitions); the page links to the next and the
# previous, and the name filter narrows the list. A page asks the cluster only about the rows it
# shows (a topic list page's offsets and sizes: its topics' partitions), so its time does not grow
# with the cluster: 50 rows of 10 partitions cost ~20 ms of the console's CPU and ~12 ms of the
# broker's (two ListOffsets rounds of 500 partitions, Metadata and DescribeLogDirs of 50 topics;
# 100 rows twice that, which a machine under load stretches past 200 ms; all 10,000 partitions
# took ~0.5 s; benchmarks/console.py). Kafka consoles page by 25 to 100.
console_page_rows = 50
# Records one message-browser page shows, and how many records a search may scan (each record is
# decoded, so this bounds the time and memory of a search).
console_records_max = 500
console_search_records_max = 100_000
# A browse or a search stops after this long, showing what it found by then.
console_read_ms_max = 10_000
# Characters of one key, value or header shown (as text, JSON or hex); the rest is cut with a note.
console_field_chars_max = 65_536
# Consumer lag is sampled every interval and kept for the window (the group page's trend chart):
# at most window / interval points per group, for at most this many groups (the first by id).
console_lag_sample_interval_ms = 30_000
console_lag_window_ms = 3_600_000
console_lag_groups_max = 1_000
# The cluster page and the topics list answer from a snapshot of every topic's metadata
# (strom.console.snapshot): fresh for this long, then refreshed in the background while the
# snapshot still answers, until it is this old (then a view waits for a fresh one). At 10,000
# partitions the Metadata rounds for every topic take longer than a page may (200 ms); 5 s is
# about how long a person takes to look at a page before the next click. The console also takes
# it when it starts and every lag-sample interval (above), which must stay under the stale bound
# so that no view, even after a long idle, waits for it.
console_snapshot_fresh_ms = 5_000
console_snapshot_stale_ms = 60_000
# A group's rebalance-history page (strom.console): the rebalances drawn and listed (the newest;
# strom keeps 50 per group, so all of them unless another server keeps more), the member ids
# listed per list of one rebalance (before, after, causes), and the moved partitions listed on
# the page in all (one rebalance keeps up to 1,000, so fifty could list 50,000). The rest are
# counted: at worst (50 rebalances of 1,000 members and 1,000 moves, member ids of 50 characters)
# a page is ~850 KB and renders in ~20 ms.
console_history_rebalances_max = 50
console_history_members_max = 50
console_history_moves_max = 2_000
# Login sessions of a console run with --console-login (strom.console.sessions). Each holds the
# user's own admin client and consumer (a connection or two to each broker they talk to, and a
# thread), so the count is bounded: a team's handful of people with a few browsers each fit; a
# login beyond it ends the least recently used session. A session unused this long ends and its
# clients close: an hour covers a person reading pages and coming back, and a stolen cookie of a
# closed laptop stops working by the next hour.
console_sessions_max = 32
console_session_idle_ms_max = 3_600_000
# Rebalance history (strom.coordinator.history): the rebalances kept per group, and in all. An entry
# costs about 100 bytes plus its member ids and moves, in memory and as one record of the group's
# __consumer_offsets partition: fifty show a group's recent past (hours of a flapping group) and a
# broker holding 10,000 groups keeps at most ~20,000 entries (tens of MB at worst) — the oldest
# entries of any group are dropped first, and their records deleted so compaction drops them too.
rebalance_history_per_group_max = 50
rebalance_history_total_max = 20_000
# Member ids listed before/after and partition moves one entry keeps (the rest are counted): an
# entry stays one small record however large the group (a 1,000-partition move is ~60 KB).
rebalance_history_members_max = 1_000
rebalance_history_moves_max = 1_000
