"""pytest fixture: a fresh emulator per test (small history window so 410 is reachable)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import Emulator


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    """A started emulator; stopped (and its watches closed) after the test."""
    emu = Emulator(history=1000, bookmark_interval=0.5).start()
    try:
        yield emu
    finally:
        emu.stop()
