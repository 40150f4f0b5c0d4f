"""Round trip of every generated message at every version.

For each (message class, version) hypothesis builds a random instance valid for that version —
fields the version lacks stay at their defaults, nullable fields are sometimes None, flexible
versions carry random unknown tagged fields — then checks decode(encode(m)) == m and that
re-encoding the decoded message gives the same bytes.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import strom.protocol.coordinator_records as coordinator_records
import strom.protocol.transaction_records as transaction_records
from strom.protocol.messages import REQUESTS, RESPONSES
from strom.protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from strom.protocol.messages.request_header import RequestHeader
from strom.protocol.messages.response_header import ResponseHeader
from strom.protocol.primitives import FieldSpec

INTEGER_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
# Known tags in the specs are small; these never collide with them.
UNKNOWN_TAGS = st.integers(min_value=1000, max_value=1100)


def _all_classes() -> list[type[Any]]:
    classes: list[type[Any]] = [*REQUESTS.values(), *RESPONSES.values()]
    classes += [ConsumerProtocolSubscription, ConsumerProtocolAssignment, RequestHeader, ResponseHeader]
    for package in (coordinator_records, transaction_records):
        classes += _record_classes(package)
    return classes


def _record_classes(package: Any) -> list[type[Any]]:
    classes: list[type[Any]] = []
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        classes += [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and value.__module__ == module.__name__
            and hasattr(value, "MIN_VERSION")
        ]
    return classes


CASES = [
    pytest.param(cls, version, id=f"{cls.NAME}-v{version}")
    for cls in _all_classes()
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
]


def _in(version_range: tuple[int, int], version: int) -> bool:
    return version_range[0] <= version <= version_range[1]


def _value_strategy(top: type[Any], type_name: str, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if type_name.startswith("[]"):
        element = _value_strategy(top, type_name[2:], version, flexible)
        return st.lists(element, max_size=2)
    if type_name in INTEGER_RANGES:
        low, high = INTEGER_RANGES[type_name]
        return st.integers(min_value=low, max_value=high)
    simple: dict[str, st.SearchStrategy[Any]] = {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(max_size=4),
        "bytes": st.binary(max_size=4),
        "records": st.binary(max_size=6),
        "uuid": st.uuids(),
    }
    if type_name in simple:
        return simple[type_name]
    return _instance_strategy(top, getattr(top, type_name), version, flexible)


def _instance_strategy(
    top: type[Any], cls: type[Any], version: int, flexible: bool
) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    spec: FieldSpec
    for spec in cls.FIELDS:
        if not _in(spec.versions, version):
            continue
        value = _value_strategy(top, spec.type, version, flexible)
        if _in(spec.nullable_versions, version):
            value = st.none() | value
        fields[spec.name] = value
    if flexible:
        fields["unknown_tagged_fields"] = st.dictionaries(UNKNOWN_TAGS, st.binary(max_size=3), max_size=2)
    return st.builds(cls, **fields)


@pytest.mark.parametrize(("cls", "version"), CASES)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(data=st.data())
def test_round_trip(cls: type[Any], version: int, data: st.DataObject) -> None:
    flexible = cls.FLEXIBLE_MIN_VERSION is not None and version >= cls.FLEXIBLE_MIN_VERSION
    message = data.draw(_instance_strategy(cls, cls, version, flexible))
    encoded = message.encode(version)
    decoded = cls.decode(encoded, version)
    assert decoded == message
    assert decoded.encode(version) == encoded


def test_every_api_pair_is_covered() -> None:
    assert len(REQUESTS) == len(RESPONSES) == 88
    # 88 APIs x (request, response) x their versions, plus the data messages and records.
    assert len(CASES) > 700
