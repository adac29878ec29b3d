"""YAML numbers read as kube's decoder (go-yaml v2) reads them: base-60 forms are strings."""

from __future__ import annotations

import pytest

from scheduler.core.safeload import load_yaml


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1:20", "1:20"),  # YAML 1.1 base 60 would make this 80
        ("-1:20:30", "-1:20:30"),
        ("190:20:30.15", "190:20:30.15"),
        ("12", 12),
        ("-3", -3),
        ("0x10", 16),
        ("1.5", 1.5),
        ("2.5E-2", 0.025),
        ("2020-01-01", "2020-01-01"),
        ("'8'", "8"),
    ],
)
def test_numbers(text: str, value: object) -> None:
    loaded = load_yaml(f"v: {text}\n", "f.yaml")
    assert loaded == {"v": value}
    assert type(loaded["v"]) is type(value)
