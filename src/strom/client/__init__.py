"""strom's own Kafka client: Producer, Consumer (manual assignment and consumer groups) and Admin (docs/client.md).

The protocol logic is sans-I/O (``connection``, ``cluster``, ``producer.accumulator``,
``producer.sequencing``, ``consumer.positions``); one background thread per client object runs an
asyncio loop that owns the sockets (``transport``). Public methods are synchronous and thread-safe.
"""
