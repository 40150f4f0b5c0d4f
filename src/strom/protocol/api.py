"""Lookups by API key over the generated codecs."""

from __future__ import annotations

from typing import Any

from strom.protocol.messages import API_NAMES, REQUESTS, RESPONSES

__all__ = ["api_name", "request_class", "response_class"]


def request_class(api_key: int) -> type[Any]:
    """The generated request class for `api_key`; KeyError if Kafka defines no such API."""
    return REQUESTS[api_key]


def response_class(api_key: int) -> type[Any]:
    """The generated response class for `api_key`; KeyError if Kafka defines no such API."""
    return RESPONSES[api_key]


def api_name(api_key: int) -> str:
    """The API's name ("Produce", "ApiVersions", ...), or "Unknown(<key>)" for a key Kafka lacks."""
    return API_NAMES.get(api_key, f"Unknown({api_key})")
