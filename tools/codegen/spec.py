"""Loads Kafka's JSON message specifications into a small typed model.

The JSON files carry `//` comment lines; those are dropped before parsing. Nothing here knows how
the Python output looks; `emit.py` does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Open-ended ranges ("3+") end at the largest int16 version.
VERSION_MAX = 0x7FFF

PRIMITIVE_TYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "string",
        "bytes",
        "uuid",
        "records",
    }
)

# Smallest encoding of one element, in bytes, used to refuse array counts that cannot fit.
FIXED_SIZE_BYTES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint16": 2,
    "uint32": 4,
    "float64": 8,
    "uuid": 16,
}


@dataclass(frozen=True)
class VersionRange:
    """Inclusive range of versions; empty when low > high."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        text = text.strip()
        if text == "none":
            return cls(1, 0)
        if text.endswith("+"):
            return cls(int(text[:-1]), VERSION_MAX)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    @property
    def empty(self) -> bool:
        return self.low > self.high

    def intersect(self, other: VersionRange) -> VersionRange:
        return VersionRange(max(self.low, other.low), min(self.high, other.high))

    def contains(self, version: int) -> bool:
        return self.low <= version <= self.high

    def covers(self, other: VersionRange) -> bool:
        """True when every version of `other` is in this range."""
        return other.empty or (self.low <= other.low and other.high <= self.high)

    def describe(self) -> str:
        if self.empty:
            return "none"
        if self.high == VERSION_MAX:
            return f"{self.low}+"
        if self.low == self.high:
            return str(self.low)
        return f"{self.low}-{self.high}"


def snake_case(name: str) -> str:
    """`TopicData` -> `topic_data`, `ProducerID` -> `producer_id`, `protocolType` -> `protocol_type`."""
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text)
    return text.lower()


@dataclass
class FieldDef:
    name: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange
    tag: int | None
    tagged_versions: VersionRange
    ignorable: bool
    about: str
    default: Any
    flexible_override: VersionRange | None

    @property
    def attribute(self) -> str:
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct_like(self) -> bool:
        """True when the field (or its array elements) is a struct."""
        return self.element_type not in PRIMITIVE_TYPES

    @property
    def is_struct(self) -> bool:
        return not self.is_array and self.type not in PRIMITIVE_TYPES


@dataclass
class StructDef:
    name: str
    fields: list[FieldDef]
    about: str = ""


@dataclass
class MessageDef:
    name: str
    kind: str  # request, response, data, header
    api_key: int | None
    valid_versions: VersionRange
    flexible_versions: VersionRange
    fields: list[FieldDef]
    structs: dict[str, StructDef] = field(default_factory=dict)
    source: str = ""


def load_json(path: Path) -> dict[str, Any]:
    lines = [
        line for line in path.read_text(encoding="utf-8").splitlines() if not line.lstrip().startswith("//")
    ]
    data: dict[str, Any] = json.loads("\n".join(lines))
    return data


def _parse_default(raw: Any) -> Any:
    """The JSON `default`, as a Python value (None when the spec gives none)."""
    if raw is None:
        return None
    if isinstance(raw, bool | int | float):
        return raw
    text = str(raw).strip()
    return text


def _parse_fields(raw_fields: list[dict[str, Any]], message: MessageDef, common: set[str]) -> list[FieldDef]:
    fields: list[FieldDef] = []
    for raw in raw_fields:
        # A field that exists only as a tagged field may give just its tagged versions
        # (TransactionLogValue's PreviousProducerId): those are its versions.
        versions = VersionRange.parse(raw["versions"] if "versions" in raw else raw["taggedVersions"])
        nullable = VersionRange.parse(raw.get("nullableVersions", "none"))
        tag = int(raw["tag"]) if "tag" in raw else None
        tagged = VersionRange.parse(raw["taggedVersions"]) if "taggedVersions" in raw else VersionRange(1, 0)
        flexible_override = VersionRange.parse(raw["flexibleVersions"]) if "flexibleVersions" in raw else None
        definition = FieldDef(
            name=raw["name"],
            type=raw["type"].strip(),
            versions=versions,
            nullable_versions=nullable,
            tag=tag,
            tagged_versions=tagged,
            ignorable=bool(raw.get("ignorable", False)),
            about=" ".join(str(raw.get("about", "")).split()),
            default=_parse_default(raw.get("default")),
            flexible_override=flexible_override,
        )
        if tag is not None and tagged != versions:
            raise ValueError(f"{message.name}.{definition.name}: tagged versions differ from versions")
        fields.append(definition)
        if definition.is_struct_like:
            struct_name = definition.element_type
            if "fields" in raw:
                children = _parse_fields(raw["fields"], message, common)
                if struct_name in message.structs and struct_name not in common:
                    raise ValueError(f"{message.name}: struct {struct_name} defined twice")
                message.structs[struct_name] = StructDef(struct_name, children, definition.about)
            elif struct_name not in common and struct_name not in message.structs:
                # Referenced before (or without) its definition: must be a common struct.
                raise ValueError(f"{message.name}: struct {struct_name} is never defined")
    return fields


def load_message(path: Path) -> MessageDef:
    data = load_json(path)
    message = MessageDef(
        name=data["name"],
        kind=data["type"],
        api_key=data.get("apiKey") if data["type"] in ("request", "response") else None,
        valid_versions=VersionRange.parse(data["validVersions"]),
        flexible_versions=VersionRange.parse(data.get("flexibleVersions", "none")),
        fields=[],
        source=path.name,
    )
    common_raw = data.get("commonStructs", [])
    common = {raw["name"] for raw in common_raw}
    # Common structs first, so references from the message body resolve.
    for raw in common_raw:
        children = _parse_fields(raw["fields"], message, common)
        message.structs[raw["name"]] = StructDef(raw["name"], children)
    message.fields = _parse_fields(data["fields"], message, common)
    return message


@dataclass(frozen=True)
class ErrorDef:
    code: int
    name: str
    retriable: str
    meaning: str


def load_errors(path: Path) -> list[ErrorDef]:
    errors: list[ErrorDef] = []
    row = re.compile(r"^\|\s*(-?\d+)\s*\|\s*([A-Z0-9_]+)\s*\|\s*([^|]*?)\s*\|\s*(.*?)\s*\|\s*$")
    for line in path.read_text(encoding="utf-8").splitlines():
        match = row.match(line)
        if match:
            errors.append(ErrorDef(int(match[1]), match[2], match[3], match[4]))
    return errors
