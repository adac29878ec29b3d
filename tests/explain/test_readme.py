"""The README shows real output: its `explain` and `simulate` excerpts match what runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _block_after(marker: str) -> str:
    """The first fenced block that opens after the line containing `marker`."""
    start = README.index(marker)
    rest = README[README.index("\n", start) :]
    if marker.startswith("topo-scheduler"):  # the marker is a command: skip its own fence
        rest = rest[rest.index("```") + 3 :]
    match = re.search(r"```\n(.*?)```", rest, re.S)
    assert match is not None, marker
    return match.group(1)


def _rows(text: str) -> dict[str, list[str]]:
    """Table rows as metric -> cells (the box-drawing separators of rich dropped)."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if len(cells) >= 2:
            rows[cells[0]] = cells[1:]
    return rows


def test_readme_explain_output_is_real(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _block_after("topo-scheduler explain --snapshot examples/snapshot.yaml")
    assert main(["explain", "--snapshot", str(ROOT / "examples/snapshot.yaml"),
                 "--pod", str(ROOT / "examples/explain-pod.yaml")]) == 0  # fmt: skip
    assert capsys.readouterr().out == shown


def test_readme_simulate_excerpt_is_real(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _block_after("An excerpt of its output")
    assert main(["simulate", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert shown.splitlines()[0] == out.splitlines()[0]
    actual = _rows(out)
    for metric, cells in _rows(shown).items():
        assert actual.get(metric) == cells, metric
