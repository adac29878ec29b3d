"""Reading values at field paths: one decoder for every external input.

API objects, annotations, the scheduler configuration, plugin args, scenarios and traces are
decoded once at the edge into typed values. Every error names the object and the field, e.g.
``Pod ml/train-0: spec.containers[0].resources.requests.cpu: ...`` or
``profiles[0].plugins.score.enabled[1].weight: ...``. Each input keeps its own exception class
(all `FieldError`s) and its own prefix (the object, or nothing for a file's top level).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldError", "Fields", "go_parse_int", "parse_decimal", "parse_host_port", "shown"]

SHOWN_CHARACTERS = 100
"""Longest value quoted whole in an error message; a longer one is cut, its length given."""


def shown(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """A value as an error message quotes it: its repr, cut to `limit` characters (with the
    full length) so that a huge input never makes a huge message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} in all"
    return f"{text[:limit]}... ({size})"


MAX_PATH_CHARACTERS = 300
"""A field path in an error is cut after this many characters, as `shown` cuts values."""


class FieldError(ValueError):
    """An invalid input value; the message names the object and the field."""


_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class Fields:
    """Reads values at field paths; failures raise `error("<prefix><path>: <message>")`.

    `unknown_lists_known`: an unknown field's error lists the known ones (for hand-written
    files) instead of kube's strict-decoding message ``unknown field "x"``.
    """

    error: type[FieldError]
    prefix: str = ""
    unknown_lists_known: bool = False

    def fail(self, path: str, message: str) -> FieldError:
        if len(path) > MAX_PATH_CHARACTERS:  # a path through a huge map key
            path = f"{path[:MAX_PATH_CHARACTERS]}... ({len(path):,} characters)"
        return self.error(f"{self.prefix}{path}: {message}" if path else f"{self.prefix}{message}")

    def within(self, prefix: str) -> Fields:
        """The same decoder for a nested object (e.g. one annotation of a node)."""
        return Fields(self.error, self.prefix + prefix, self.unknown_lists_known)

    # ------------------------------------------------------------------ containers

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any]:
        """A mapping; None reads as empty unless `required`."""
        if value is None and not required:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be a mapping, got {type(value).__name__}")
        return value

    def list(self, value: Any, path: str) -> list[Any]:
        """A list; None reads as empty."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list, got {type(value).__name__}")
        return value

    def strict(self, value: Any, path: str, allowed: set[str]) -> Mapping[str, Any]:
        """A mapping whose keys are all in `allowed` (strict decoding, as kube's)."""
        data = self.mapping(value, path)
        for key in data:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                if self.unknown_lists_known:
                    raise self.fail(where, f"unknown field (known: {', '.join(sorted(allowed))})")
                raise self.fail(where, f'unknown field "{key}"')
        return data

    def string_map(self, value: Any, path: str) -> dict[str, str]:
        result: dict[str, str] = {}
        for key, item in self.mapping(value, path).items():
            if not isinstance(item, str):
                raise self.fail(f"{path}.{key}", f"must be a string, got {type(item).__name__}")
            result[str(key)] = item
        return result

    # ------------------------------------------------------------------ scalars

    def string(self, value: Any, path: str, default: str = _MISSING) -> str:
        """A string; None gives `default` (required when there is none)."""
        if value is None:
            if default is _MISSING:
                raise self.fail(path, "is required")
            return default
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string, got {type(value).__name__}")
        return value

    def name(self, value: Any, path: str, default: str = _MISSING) -> str:
        """A non-empty string."""
        if value is None and default is not _MISSING:
            return default
        if not isinstance(value, str) or not value:
            raise self.fail(path, f"must be a non-empty string, got {shown(value)}")
        return value

    def optional_string(self, value: Any, path: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(path, f"must be a string or null, got {shown(value)}")
        return value

    def integer(
        self,
        value: Any,
        path: str,
        default: int = _MISSING,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int:
        """An integer (never a bool); None gives `default` (required when there is none)."""
        if value is None:
            if default is _MISSING:
                raise self.fail(path, "is required")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer, got {shown(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail(path, f"must be <= {maximum:,}, got {value:,}")
        return value

    def optional_integer(self, value: Any, path: str, *, minimum: int | None = None) -> int | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"must be an integer or null, got {shown(value)}")
        return self.integer(value, path, minimum=minimum)

    def number(
        self,
        value: Any,
        path: str,
        default: float = _MISSING,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float:
        """A finite number; None gives `default` (required when there is none)."""
        if value is None:
            if default is _MISSING:
                raise self.fail(path, "is required")
            return default
        valid = isinstance(value, int | float) and not isinstance(value, bool)
        if not valid or not math.isfinite(value):
            raise self.fail(path, f"must be a finite number, got {shown(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(path, f"must be >= {minimum:g}, got {shown(value)}")
        if maximum is not None and value > maximum:
            raise self.fail(path, f"must be <= {maximum:,.15g}, got {shown(value)}")
        return float(value)

    def boolean(self, value: Any, path: str, default: bool = _MISSING) -> bool:
        if value is None:
            if default is _MISSING:
                raise self.fail(path, "is required")
            return default
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, got {shown(value)}")
        return value

    def string_list(self, value: Any, path: str) -> tuple[str, ...]:
        return tuple(self.string(v, f"{path}[{i}]") for i, v in enumerate(self.list(value, path)))


# ---------------------------------------------------------------------- text values
# Flags, CSV cells and annotation values arrive as text. One strict reader for each kind,
# so that no input accepts what Python's int() would (underscores, spaces, other digits).

_ASCII_DIGITS = frozenset("0123456789")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def go_parse_int(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): ASCII digits, optional sign, int64 range; None
    for anything else (``1_0``, `` 1``, ``١``, ``0x10``, ``""``)."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not _ASCII_DIGITS.issuperset(digits):
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19:  # beyond int64 (and int() refuses 4,300 digits or more)
        return None
    value = -int(significant) if text[0] == "-" else int(significant)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_decimal(text: str) -> float | None:
    """A finite decimal number in plain ASCII (``2``, ``0.5``, ``1e3``); None for anything
    else, including what Python's float() also takes (``1_0``, `` 1``, ``nan``, ``inf``)."""
    if _DECIMAL.fullmatch(text) is None:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_host_port(text: str, flag: str) -> tuple[str, int]:
    """A listen address ``HOST:PORT`` (IPv6 as ``[::1]:10259``; an empty host is 0.0.0.0)
    -> (host, port). ValueError names the flag; the host must be an IP address or localhost."""
    host, sep, port_text = text.rpartition(":")
    port = go_parse_int(port_text) if sep and port_text[:1] not in ("+", "-") else None
    if port is None or not 0 <= port <= 65535:
        shown = text if len(text) <= 80 else text[:80] + "..."
        raise ValueError(f"{flag}: must be HOST:PORT with a port 0-65535, got {shown!r}")
    host = host.strip("[]") or "0.0.0.0"
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(
                f"{flag}: {host[:80]!r} is not an IP address (HOST:PORT, e.g. 0.0.0.0:{port})"
            ) from None
    return host, port
