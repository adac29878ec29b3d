"""Fixtures for the kube adapter tests: the API-server emulator package lives in tests/."""

from __future__ import annotations

from tests.emulator.fixture import emulator

__all__ = ["emulator"]
