"""The one way a handler says no: an error code and a message for the client."""

from __future__ import annotations

from strom.protocol.errors import ErrorCode


class Refused(Exception):
    """Raised inside a handler for a request (or part of one) answered with ``error``."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
