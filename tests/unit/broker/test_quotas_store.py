"""The broker side of quotas: the JSON store, what each request is charged, the mute (fake clock)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from strom.base.clock import ManualClock
from strom.broker.config import BrokerConfig
from strom.broker.quotas import QUOTAS_FILE_NAME, BrokerQuotas, FileQuotaStore, set_throttle_time
from strom.protocol.messages.produce import ProduceResponse
from strom.security.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
)


def quotas_in(tmp_path: Path, clock: ManualClock, **values: str) -> BrokerQuotas:
    config = BrokerConfig(host="127.0.0.1", port=0, data_dir=tmp_path, values=values)
    quotas = BrokerQuotas(config, clock)
    quotas.load()
    return quotas


def test_the_store_round_trips_and_forgets_emptied_entities(tmp_path: Path) -> None:
    store = FileQuotaStore(tmp_path)
    assert store.load() == {}
    asyncio.run(store.save(QuotaEntity.user_client("alice", None), {PRODUCER_BYTE_RATE: 1024.0}))
    asyncio.run(store.save(QuotaEntity.client("app"), {CONSUMER_BYTE_RATE: 2048.0, REQUEST_PERCENTAGE: 12.5}))
    asyncio.run(store.save(QuotaEntity.user(None), {PRODUCER_BYTE_RATE: 1.0}))
    asyncio.run(store.save(QuotaEntity.user(None), {}))
    assert FileQuotaStore(tmp_path).load() == {
        QuotaEntity.user_client("alice", None): {PRODUCER_BYTE_RATE: 1024.0},
        QuotaEntity.client("app"): {CONSUMER_BYTE_RATE: 2048.0, REQUEST_PERCENTAGE: 12.5},
    }
    assert not (tmp_path / (QUOTAS_FILE_NAME + ".tmp")).exists()


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"version": 2, "entities": []}),
        json.dumps({"version": 1, "entities": [{"entity": [["group", "g"]], "quotas": {}}]}),
        json.dumps({"version": 1, "entities": [{"entity": [["user", "a"]], "quotas": {"bogus": 1}}]}),
    ],
)
def test_a_file_strom_cannot_read_stops_the_start_with_its_name(tmp_path: Path, content: str) -> None:
    (tmp_path / QUOTAS_FILE_NAME).write_text(content)
    with pytest.raises(ValueError, match=QUOTAS_FILE_NAME):
        FileQuotaStore(tmp_path).load()


def test_nothing_is_active_without_quotas_and_changes_apply_at_once(tmp_path: Path) -> None:
    clock = ManualClock()
    quotas = quotas_in(tmp_path, clock)
    assert not quotas.active
    asyncio.run(quotas.set_entity(QuotaEntity.client("app"), {PRODUCER_BYTE_RATE: 1000.0}))
    assert quotas.active
    assert quotas_in(tmp_path, clock).active  # persisted
    asyncio.run(quotas.set_entity(QuotaEntity.client("app"), {}))
    assert not quotas.active


def test_what_each_request_is_charged(tmp_path: Path) -> None:
    clock = ManualClock()
    quotas = quotas_in(tmp_path, clock, **{"quota.window.num": "2", "quota.window.size.seconds": "1"})
    asyncio.run(
        quotas.set_entity(
            QuotaEntity.client(None),
            {PRODUCER_BYTE_RATE: 1000.0, CONSUMER_BYTE_RATE: 1000.0, REQUEST_PERCENTAGE: 10.0},
        )
    )
    # Produce: the request's bytes (one sample's worth is free, the rest costs time).
    assert quotas.charge("ANONYMOUS", "p", 0, 3000, 10, 0.0, False) == 2000
    # Fetch: the answer's bytes; a follower's fetch and the brokers' own requests cost nothing.
    assert quotas.charge("ANONYMOUS", "c", 1, 10, 1500, 0.0, False) == 500
    assert quotas.charge("ANONYMOUS", "f", 1, 10, 10**9, 0.0, True) == 0
    assert quotas.charge("ANONYMOUS", "f", 6, 10**9, 10**9, 100.0, False) == 0
    # Handler time: 0.2 s against 10 % of a thread (0.1 s of credit to start with).
    assert quotas.charge("ANONYMOUS", "m", 3, 10, 10, 0.2, False) == 1000
    # A null client id is the empty one.
    assert quotas.charge("ANONYMOUS", None, 0, 1000, 0, 0.0, False) == 0


def test_the_mute_lasts_the_longest_throttle(tmp_path: Path) -> None:
    clock = ManualClock()
    quotas = quotas_in(tmp_path, clock)
    assert quotas.mute_left_ms(7) == 0
    quotas.mute(7, 500)
    quotas.mute(7, 200)
    clock.advance(100)
    assert quotas.mute_left_ms(7) == 400
    clock.advance(400)
    assert quotas.mute_left_ms(7) == 0
    assert 7 not in quotas.muted_until_ms
    quotas.mute(8, 10)
    quotas.forget(8)
    assert quotas.mute_left_ms(8) == 0


def test_the_throttle_time_goes_in_the_answer_when_it_is_longer() -> None:
    response = ProduceResponse(throttle_time_ms=0)
    assert set_throttle_time(response, 300)
    assert not set_throttle_time(response, 100)
    assert response.throttle_time_ms == 300
    assert not set_throttle_time(None, 100)
    assert not set_throttle_time(object(), 100)
