"""The one loader for input files: limits, UTF-8, timestamps as strings, one-line errors."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from scheduler.core.safeload import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    InputError,
    load_json,
    load_yaml,
    load_yaml_all,
    read_input,
)

BOMB = "\n".join(
    [
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]",
        *(
            f"{chr(ord('b') + k)}: &{chr(ord('b') + k)} ["
            + ", ".join([f"*{chr(ord('a') + k)}"] * 10)
            + "]"
            for k in range(8)
        ),
    ]
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000, f"f.yaml: line 1, column {MAX_DEPTH + 1}: nested more than 100 levels"),
        ("a:\n" + "".join("  " * k + "- \n" for k in range(1, 150)), "nested more than 100"),
        ("a: " + "1" * 5001, "f.yaml: line 1, column 4: integer of 5,001 characters (at most 100)"),
        ("a: -0x" + "f" * 200, "integer of 203 characters"),
        ("a: !!int xx", "f.yaml: not valid YAML: invalid literal for int()"),
        ("a: [1, *x]", "f.yaml: not valid YAML: line 1, column 8: found undefined alias 'x'"),
        ("{[1]: 2}", "not valid YAML: line 1, column 2: found unhashable key"),
        (BOMB, "f.yaml: more than 10,000,000 values once aliases are expanded"),
    ],
)
def test_yaml_errors_are_one_line(text: str, message: str) -> None:
    start = time.monotonic()
    with pytest.raises(InputError) as err:
        load_yaml(text, "f.yaml")
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert time.monotonic() - start < 10


def test_timestamps_stay_strings() -> None:
    data = load_yaml("a: 2020-02-30\nb: 2024-01-01T00:00:00Z\nc: !!timestamp 2020-13-01", "f")
    assert data == {"a": "2020-02-30", "b": "2024-01-01T00:00:00Z", "c": "2020-13-01"}


def test_limits_leave_ordinary_documents_alone() -> None:
    nested = "a:" + "".join("\n" + "  " * k + f"k{k}:" for k in range(1, MAX_DEPTH - 1)) + " 1"
    assert load_yaml(nested, "f") is not None
    assert load_yaml("a: " + "9" * MAX_INT_DIGITS, "f") == {"a": int("9" * MAX_INT_DIGITS)}
    assert load_yaml_all("a: 1\n---\n---\nb: &x [1]\nc: *x\n", "f") == [
        {"a": 1},
        None,
        {"b": [1], "c": [1]},
    ]
    with pytest.raises(InputError, match="holds 2 YAML documents, expected one"):
        load_yaml("a: 1\n---\nb: 2\n", "f")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 100_000, "j: nested more than 100 levels deep"),
        ("[" * 500 + "]" * 500, "j: nested more than 100 levels deep"),
        ('{"index": ' + "1" * 5001 + "}", "j: not valid JSON: integer of 5,001 characters"),
        ("[NaN]", "j: not valid JSON: NaN is not JSON"),
        ("[1,", "j: not valid JSON: line 1, column 4: Expecting value"),
    ],
)
def test_json_errors(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        load_json(text, "j")
    assert message in str(err.value), str(err.value)


def test_read_input_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: 1\nb: \xff\xfe\n")
    with pytest.raises(InputError, match=r"bad.yaml: not UTF-8 text \(byte 8\)"):
        read_input(bad)
    with pytest.raises(InputError, match=r"missing\.yaml: No such file or directory"):
        read_input(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match="Is a directory"):
        read_input(tmp_path)

    class Stdin:
        buffer = io.BytesIO(b"\xc3\x28")

    monkeypatch.setattr("sys.stdin", Stdin())
    with pytest.raises(InputError, match=r"^-: not UTF-8 text \(byte 0\)$"):
        read_input("-")


def test_a_file_of_too_many_values_is_refused_while_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser holds several hundred bytes per value: a file of millions of tiny values
    is refused at the first value over the limit, not after gigabytes."""
    from scheduler.core import safeload

    monkeypatch.setattr(safeload, "MAX_WRITTEN_VALUES", 100)
    assert len(load_yaml("- 1\n" * 99, "f.yaml")) == 99  # 99 items and the list: 100 values
    with pytest.raises(InputError) as info:
        load_yaml("- 1\n" * 100, "f.yaml")
    assert str(info.value) == "f.yaml: line 100, column 3: more than 100 values"


def test_a_key_written_twice_is_an_error_as_in_kubes_strict_decoding() -> None:
    with pytest.raises(InputError) as info:
        load_yaml("profiles: []\nkind: x\nprofiles: [a]\n", "config.yaml")
    assert str(info.value) == 'config.yaml: line 3, column 1: key "profiles" already set in map'
    with pytest.raises(InputError, match='line 1, column 12: key "x" already set'):
        load_yaml("a: {x: 1,  x: 2}", "f.yaml")
    # a merge key's values are overridden by the mapping's own, as YAML means
    assert load_yaml("b: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n", "f.yaml") == {
        "b": {"x": 1}, "m": {"x": 2},
    }  # fmt: skip
