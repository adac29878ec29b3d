"""Fixtures of the shipping tests (helpers live in _support.py)."""

from __future__ import annotations

import pytest

from ._support import objects


@pytest.fixture(scope="session")
def default_objects() -> list[dict]:
    return objects()
