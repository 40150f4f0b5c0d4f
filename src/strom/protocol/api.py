"""Lookups by API key over the generated codecs, and strom's own API (``strom.protocol.group_history``)."""

from __future__ import annotations

from typing import Any

from strom.protocol.group_history import StromGroupHistoryRequest, StromGroupHistoryResponse
from strom.protocol.messages import API_NAMES, REQUESTS, RESPONSES

__all__ = ["STROM_CLIENT_SOFTWARE_NAME", "api_name", "is_strom_only", "request_class", "response_class"]

# What strom's client names itself in ApiVersions v3+ (client_software_name): the broker lists its
# strom-only APIs to this client only (Kafka's clients never send them; kafka-python fails on a key
# Kafka does not have).
STROM_CLIENT_SOFTWARE_NAME = "strom-python"

# APIs only strom has (hand-written, outside the generated package): key -> (request, response).
STROM_ONLY_APIS: dict[int, tuple[type[Any], type[Any]]] = {
    StromGroupHistoryRequest.API_KEY: (StromGroupHistoryRequest, StromGroupHistoryResponse),
}


def is_strom_only(api_key: int) -> bool:
    return api_key in STROM_ONLY_APIS


def request_class(api_key: int) -> type[Any]:
    """The request class for `api_key`; KeyError if neither Kafka nor strom defines such an API."""
    found = REQUESTS.get(api_key)
    return found if found is not None else STROM_ONLY_APIS[api_key][0]


def response_class(api_key: int) -> type[Any]:
    """The response class for `api_key`; KeyError if neither Kafka nor strom defines such an API."""
    found = RESPONSES.get(api_key)
    return found if found is not None else STROM_ONLY_APIS[api_key][1]


def api_name(api_key: int) -> str:
    """The API's name ("Produce", "ApiVersions", ...), or "Unknown(<key>)" for a key Kafka lacks."""
    if api_key in STROM_ONLY_APIS:
        return "StromGroupHistory"
    return API_NAMES.get(api_key, f"Unknown({api_key})")
