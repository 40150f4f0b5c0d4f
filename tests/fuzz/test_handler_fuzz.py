"""Every handler, every version, in process: seeded random requests (wild and sensible, see
``RequestFactory``) dispatched to a broker with real storage and a manual clock.

INVARIANT: a request either gets an answer or closes its connection (``CloseConnection``); no
other exception escapes a handler. Requests that park (a join waiting for its rebalance) are given
up on after a moment, as a client that goes away would be. The subprocess campaign in
``test_broker_fuzz`` checks the same over the wire; this one replays without any timing and shows
the failing request and traceback directly.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pytest

from strom.broker import handlers
from strom.broker.registry import HANDLERS
from strom.broker.server import CloseConnection
from strom.protocol.headers import encode_request
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from tests.fuzz.request_factory import RequestFactory
from tests.unit.broker.conftest import InProcessBroker

handlers.register_all()
SEED = 20261122
REQUESTS_PER_VERSION = 20
PARKED_GIVE_UP_S = 0.05
TOPICS = ("fuzz-a", "fuzz-compact")
GROUPS = ("fuzz-group",)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    instance = InProcessBroker(tmp_path_factory.mktemp("handler-fuzz") / "data")
    for name in TOPICS:
        configs = [CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact")]
        topic = CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=2, replication_factor=1, configs=configs if "compact" in name else []
        )
        instance.call(CreateTopicsRequest(topics=[topic], timeout_ms=1000), 5)
    instance.call(FindCoordinatorRequest(key=GROUPS[0]), 1)
    yield instance
    instance.close()


@pytest.mark.parametrize("api_key", sorted(HANDLERS))
def test_every_request_is_answered_or_closes_the_connection(broker: InProcessBroker, api_key: int) -> None:
    handler = HANDLERS[api_key]
    rng = random.Random(SEED + api_key)
    topic_ids = [topic.topic_id for name in TOPICS if (topic := broker.server.state.logs.topic(name))]
    factory = RequestFactory(rng, [*TOPICS, "absent-topic"], topic_ids, GROUPS)
    for version in range(handler.min_version, handler.max_version + 1):
        for index in range(REQUESTS_PER_VERSION):
            request = factory.build(handler.request_type, version)
            frame = encode_request(api_key, version, index, "fuzz", request.encode(version))
            dispatched = broker.server._dispatch(frame[4:], "fuzz", 1)
            try:
                broker.loop.run_until_complete(asyncio.wait_for(dispatched, PARKED_GIVE_UP_S))
            except (CloseConnection, TimeoutError):
                pass
            except Exception as error:  # the finding: report which request did it
                raise AssertionError(
                    f"{handler.name} v{version} escaped with {error!r}: {request!r}"
                ) from error
