"""The supported Kubernetes versions are stated once and agree: Chart.yaml, the schema range
the shipped objects are validated against, the README and the install guide."""

from __future__ import annotations

import re

import yaml

from ._support import CHART_DIR, KUBE_VERSIONS, ROOT


def _floor() -> str:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    match = re.fullmatch(r">=(\d+\.\d+)\.0-0", chart["kubeVersion"])
    assert match, chart["kubeVersion"]
    return match.group(1)


def test_chart_floor_is_the_oldest_validated_version() -> None:
    assert _floor() == KUBE_VERSIONS[0]


def test_readme_and_install_guide_state_the_same_range() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Supported Kubernetes versions", 1)[1].split("\n## ", 1)[0]
    assert f"{KUBE_VERSIONS[0]} to {KUBE_VERSIONS[-1]}" in section
    assert f'kubeVersion: ">={_floor()}.0-0"' in section
    install = (ROOT / "docs" / "install.md").read_text()
    assert f"Kubernetes {_floor()} or newer" in install
