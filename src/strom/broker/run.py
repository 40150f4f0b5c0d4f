"""Run a broker in this process until SIGTERM or SIGINT."""

from __future__ import annotations

import logging

from strom.broker.config import BrokerConfig
from strom.broker.server import BrokerServer

log = logging.getLogger("strom.broker")


def run_broker(config: BrokerConfig, metrics_port: int | None = None) -> int:
    import uvloop

    unused = config.unused_kafka_keys()
    if unused:
        # One line for them all: a stock server.properties sets a dozen of these.
        log.warning("ignoring Kafka settings strom does not use: %s", ", ".join(unused))

    async def main() -> None:
        server = BrokerServer(config, metrics_port=metrics_port)
        await server.serve_until_signalled()

    try:
        uvloop.run(main())
    except OSError as error:
        log.error("cannot start the broker: %s", error)
        return 1
    return 0
