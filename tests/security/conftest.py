"""Security tests run real brokers with the compat harness (``tests/compat/conftest.py``)."""

from __future__ import annotations

from tests.compat.conftest import pytest_runtest_makereport, start_broker

__all__ = ["pytest_runtest_makereport", "start_broker"]
