"""The pure half of the source: option parsing and offset arithmetic (no Spark, no broker)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.spark.options import (
    READ_OPTION_NAMES,
    OffsetRange,
    OffsetSpec,
    SourceOptionsError,
    limit_offsets,
    offsets_from_checkpoint,
    offsets_from_json,
    offsets_to_json,
    option_warnings,
    parse_read_options,
    parse_write_options,
    split_ranges,
)

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}


def test_kafka_prefixed_options_go_to_the_client_and_bootstrap_is_accepted_both_ways() -> None:
    options = parse_read_options(
        {"kafka.bootstrap.servers": "h:1", "kafka.max.poll.records": "7", "subscribe": "a, b"},
        streaming=False,
    )
    assert options.client_config == {"bootstrap.servers": "h:1", "max.poll.records": "7"}
    assert options.subscribe == ("a", "b")
    assert parse_read_options({**BOOTSTRAP, "subscribe": "a"}, streaming=False).client_config == BOOTSTRAP


def test_exactly_one_way_to_choose_topics() -> None:
    with pytest.raises(SourceOptionsError, match="exactly one"):
        parse_read_options(BOOTSTRAP, streaming=False)
    with pytest.raises(SourceOptionsError, match="subscribe, assign"):
        parse_read_options({**BOOTSTRAP, "subscribe": "a", "assign": '{"a": [0]}'}, streaming=False)
    with pytest.raises(SourceOptionsError, match=r"bootstrap\.servers"):
        parse_read_options({"subscribe": "a"}, streaming=False)


def test_assign_pattern_and_matching() -> None:
    assigned = parse_read_options({**BOOTSTRAP, "assign": '{"a": [0, 2], "b": [1]}'}, streaming=True)
    assert assigned.assign == (("a", 0), ("a", 2), ("b", 1))
    pattern = parse_read_options({**BOOTSTRAP, "subscribePattern": "page_.*"}, streaming=True)
    assert pattern.matches("page_views") and not pattern.matches("xpage_views")
    with pytest.raises(SourceOptionsError, match="assign"):
        parse_read_options({**BOOTSTRAP, "assign": '{"a": "0"}'}, streaming=True)


def test_offset_specs_follow_the_kafka_source_precedence() -> None:
    base = {**BOOTSTRAP, "subscribe": "t"}
    assert parse_read_options({**base, "startingOffsets": "earliest"}, streaming=True).starting == OffsetSpec(
        "earliest"
    )
    explicit = parse_read_options({**base, "startingOffsets": '{"t": {"0": 5, "1": -2}}'}, streaming=True)
    assert explicit.starting == OffsetSpec("offsets", {("t", 0): 5, ("t", 1): -2})
    by_time = parse_read_options(
        {**base, "startingOffsets": "earliest", "startingTimestamp": "1000"}, streaming=True
    )
    assert by_time.starting == OffsetSpec("timestamp", timestamp_ms=1000)
    assert parse_read_options(base, streaming=True).starting is None
    with pytest.raises(SourceOptionsError, match="batch"):
        parse_read_options({**base, "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(SourceOptionsError, match="earliest"):
        parse_read_options({**base, "endingOffsets": '{"t": {"0": -2}}'}, streaming=False)
    with pytest.raises(SourceOptionsError, match="not valid JSON"):
        parse_read_options({**base, "startingOffsets": "{nope"}, streaming=False)


def test_flags_and_numbers_are_checked() -> None:
    base = {**BOOTSTRAP, "subscribe": "t"}
    options = parse_read_options(
        {
            **base,
            "failOnDataLoss": "False",
            "includeHeaders": "true",
            "maxOffsetsPerTrigger": "10",
            "minPartitions": "4",
            "groupId": "g",
        },
        streaming=True,
    )
    assert (options.fail_on_data_loss, options.include_headers) == (False, True)
    assert (options.max_offsets_per_trigger, options.min_partitions, options.group_id) == (10, 4, "g")
    with pytest.raises(SourceOptionsError, match="maxOffsetsPerTrigger"):
        parse_read_options({**base, "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(SourceOptionsError, match="failOnDataLoss"):
        parse_read_options({**base, "failOnDataLoss": "maybe"}, streaming=True)


def test_write_options() -> None:
    assert parse_write_options({**BOOTSTRAP, "topic": "out"}).topic == "out"
    assert parse_write_options(BOOTSTRAP).topic is None


def test_offsets_json_round_trip() -> None:
    offsets = {("a", 0): 3, ("a", 10): 4, ("b", 1): 0}
    nested = offsets_to_json(offsets)
    assert nested == {"a": {"0": 3, "10": 4}, "b": {"1": 0}}
    assert offsets_from_checkpoint(nested) == offsets
    assert offsets_from_json("x", '{"a": {"0": 3}}') == {("a", 0): 3}


def test_limit_shares_the_budget_in_proportion_to_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}
    assert limit_offsets(start, latest, 40) == {("t", 0): 30, ("t", 1): 110}
    assert limit_offsets(start, latest, 1000) == latest


@settings(max_examples=200, deadline=None)
@given(
    backlogs=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=6),
    max_records=st.integers(min_value=1, max_value=500),
)
def test_limit_admits_exactly_the_budget_and_drains_in_ceil_batches(
    backlogs: list[int], max_records: int
) -> None:
    latest = {("t", index): 10 + backlog for index, backlog in enumerate(backlogs)}
    position = {("t", index): 10 for index in range(len(backlogs))}
    batches = 0
    while position != latest:
        end = limit_offsets(position, latest, max_records)
        admitted = sum(end[tp] - position[tp] for tp in latest)
        remaining = sum(latest[tp] - position[tp] for tp in latest)
        assert admitted == min(max_records, remaining)
        assert all(position[tp] <= end[tp] <= latest[tp] for tp in latest)
        position = end
        batches += 1
    assert batches == math.ceil(sum(backlogs) / max_records)


def test_split_ranges_covers_each_range_exactly() -> None:
    ranges = [OffsetRange("t", 0, 0, 1000), OffsetRange("t", 1, 5, 15), OffsetRange("t", 2, 7, 7)]
    assert split_ranges(ranges, None) == ranges[:2]
    pieces = split_ranges(ranges, 10)
    assert len(pieces) >= 10 - 1
    for original in ranges[:2]:
        mine = [piece for piece in pieces if piece.partition == original.partition]
        assert mine[0].from_offset == original.from_offset and mine[-1].until_offset == original.until_offset
        assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(mine))
        assert all(piece.size > 0 for piece in mine)
    large = [piece for piece in pieces if piece.partition == 0]
    assert len(large) > len(pieces) - len(large)


def test_misspelt_option_names_are_warned_about_with_the_name_meant() -> None:
    # Spark hands the names lower-cased.
    given = {
        "bootstrap.servers": "h:1",
        "subscribe": "t",
        "startingoffset": "earliest",
        "maxoffsetpertrigger": "10",
        "includeheaders": "true",
        "kafka.request.timeout.ms": "5000",
        "kafka.fetch.max.byte": "1",
        "maxtriggerdelay": "5m",
        "path": "somewhere",
    }
    warnings = option_warnings(given, side="read", client_keys=["request.timeout.ms", "fetch.max.bytes"])
    assert warnings == [
        "format('strom'): option 'kafka.fetch.max.byte' is not a setting of strom's client "
        "(did you mean kafka.fetch.max.bytes?); ignored",
        "format('strom'): unknown read option 'maxoffsetpertrigger' (did you mean maxOffsetsPerTrigger?); ignored",
        "format('strom'): option 'maxTriggerDelay' of Spark's Kafka source is not supported here; ignored",
        "format('strom'): unknown read option 'path'; ignored",
        "format('strom'): unknown read option 'startingoffset' (did you mean startingOffsets?); ignored",
    ]
    # Every documented option, in any case, passes without a word.
    assert option_warnings({name.lower(): "x" for name in READ_OPTION_NAMES}, side="read") == []
    assert option_warnings({name: "x" for name in READ_OPTION_NAMES}, side="read") == []
    assert (
        option_warnings({"checkpointlocation": "/c", "topic": "t", "bootstrap.servers": "h"}, side="write")
        == []
    )
    assert option_warnings({"topics": "t"}, side="write") == [
        "format('strom'): unknown write option 'topics' (did you mean topic?); ignored"
    ]
