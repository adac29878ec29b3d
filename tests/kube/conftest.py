"""Fixtures for the kube adapter tests: the API-server emulator package lives in tests/."""

from __future__ import annotations

import sys
from pathlib import Path

# tests/ is not a package: make `tests.emulator` importable from the repository root
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.emulator.fixture import emulator  # noqa: E402

__all__ = ["emulator"]
