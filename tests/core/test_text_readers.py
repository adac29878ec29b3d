"""The one strict reader for integers, decimals and listen addresses given as text (flags,
CSV cells, annotation values): what Python's int()/float() would also accept is refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.core.decode import go_parse_int, parse_decimal, parse_host_port


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("+7", 7),
        ("-12", -12),
        ("007", 7),
        (str(2**63 - 1), 2**63 - 1),
        (str(-(2**63)), -(2**63)),
        (str(2**63), None),
        ("1_0", None),
        (" 1", None),
        ("1 ", None),
        ("", None),
        ("+", None),
        ("1.0", None),
        ("0x10", None),
        ("١٢", None),  # Arabic-Indic digits: int() takes them
        ("²", None),
        ("9" * 5000, None),
        ("0" * 5000 + "7", 7),
    ],
)
def test_go_parse_int(text: str, value: int | None) -> None:
    assert go_parse_int(text) == value


@given(st.text(max_size=8))
def test_go_parse_int_is_strconv(text: str) -> None:
    expected = int(text) if re.fullmatch(r"[+-]?[0-9]+", text, flags=re.ASCII) else None
    assert go_parse_int(text) == expected


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2.0),
        ("0.5", 0.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("-1e3", -1000.0),
        ("1E-2", 0.01),
        ("1_0", None),
        ("nan", None),
        ("-inf", None),
        ("1e999", None),
        (" 1", None),
        ("1e", None),
        ("", None),
        ("٣", None),
    ],
)
def test_parse_decimal(text: str, value: float | None) -> None:
    assert parse_decimal(text) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:10270", ("127.0.0.1", 10270)),
        (":80", ("0.0.0.0", 80)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:65535", ("localhost", 65535)),
    ],
)
def test_parse_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text, "--x") == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("127.0.0.1:99999", "port 0-65535"),
        ("127.0.0.1:-1", "port 0-65535"),
        ("127.0.0.1:+80", "port 0-65535"),
        ("127.0.0.1:8_0", "port 0-65535"),
        ("127.0.0.1", "port 0-65535"),
        ("example.com:80", "'example.com' is not an IP address"),
        ("", "port 0-65535"),
        ("127.0.0.1:" + "9" * 5000, "'127.0.0.1:99999"),
    ],
)
def test_parse_host_port_refuses(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)) as info:
        parse_host_port(text, "--metrics-bind-address")
    assert str(info.value).startswith("--metrics-bind-address: ")
    assert len(str(info.value)) < 200
