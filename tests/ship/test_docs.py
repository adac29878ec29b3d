"""docs/install.md and the chart's NOTES say what the chart does."""

from __future__ import annotations

import re
import shlex

import helm_python
import pytest
import yaml

from ._support import ROOT, find, notes, objects, render

DOC = ROOT / "docs" / "install.md"


def _set_expressions(text: str) -> list[str]:
    """Every `--set` expression of the shell commands in a text (continuations joined)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found: list[str] = []
    for line in joined.splitlines():
        if "--set" not in line:
            continue
        words = shlex.split(line.strip().lstrip("`").rstrip("`"))
        found += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
    return found


def _code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.DOTALL)


@pytest.mark.parametrize("source", ["docs", "notes"])
def test_every_set_shown_is_valid_and_changes_the_release(source: str) -> None:
    text = DOC.read_text() if source == "docs" else notes()
    expressions = _set_expressions(text)
    assert expressions
    for expression in expressions:
        values = helm_python.parse_set_string(expression)
        assert render(values) != render(), expression  # renders (schema passes) and changes it


def test_default_configuration_shown_is_the_rendered_one() -> None:
    text = DOC.read_text()
    shown = [
        yaml.safe_load(block)
        for block in _code_blocks(text, "yaml")
        if "KubeSchedulerConfiguration" in block
    ]
    assert len(shown) == 1
    rendered = yaml.safe_load(find(objects(), "ConfigMap")["data"]["config.yaml"])
    assert shown[0] == rendered


def test_names_in_commands_are_the_rendered_names(default_objects: list[dict]) -> None:
    text = DOC.read_text() + notes()
    configmap = find(default_objects, "ConfigMap")["metadata"]["name"]
    deployment = find(default_objects, "Deployment")
    service = find(default_objects, "Service")["metadata"]["name"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-name="))
    for name in re.findall(r"edit configmap ([\w.-]+)", text):
        assert name == configmap
    for name in re.findall(r"deploy/([\w.-]+)", text):
        assert name == deployment["metadata"]["name"]
    for name in re.findall(r"svc/([\w.-]+)", text):
        assert name == service
    for name in re.findall(r"(?:get|delete) lease ([\w.-]+)", text):
        assert name == lease
    assert re.findall(r"edit configmap", text) and re.findall(r"delete lease", text)


def test_files_named_in_the_docs_exist() -> None:
    text = DOC.read_text()
    paths = set(re.findall(r"\b((?:examples/pods|manifests|helm|hack)/[\w./-]*\w)", text))
    assert "examples/pods/indexed-job.yaml" in paths or "indexed-job.yaml" in text
    for path in paths:
        assert (ROOT / path).exists(), path
    for name in re.findall(r"`([\w-]+\.yaml)` \|", text):
        assert (ROOT / "examples" / "pods" / name).is_file(), name


def test_values_table_names_real_values_with_their_defaults() -> None:
    values = yaml.safe_load((ROOT / "helm" / "topo-scheduler" / "values.yaml").read_text())
    rows = re.findall(r"^\| `([\w.<>]+)`(?: / `(\w+)`)? \| (.+?) \|", DOC.read_text(), re.M)
    assert len(rows) >= 8
    for key, sibling, default in rows:
        node = values
        parts = key.split(".")
        for part in parts:
            if part.startswith("<"):
                break
            assert part in node, key
            parent, node = node, node[part]
        if sibling:
            assert sibling in parent, sibling
        literal = re.fullmatch(r"`(.*)`", default.strip())
        if literal and not key.endswith(">"):
            assert yaml.safe_load(literal.group(1)) == (
                node if not isinstance(node, dict) else yaml.safe_load("{" + literal.group(1) + "}")
            ), key


def test_event_filters_name_the_schedulers_reporting_controller() -> None:
    from scheduler.kube.events import COMPONENT

    text = DOC.read_text() + notes()
    components = re.findall(r"reportingComponent=([\w.-]+)", text)
    assert len(components) >= 4
    assert set(components) == {COMPONENT}


def test_annotations_and_policies_named_are_the_schedulers() -> None:
    from scheduler.core.topology import schema

    known = {
        schema.ANNOTATION_TOPOLOGY,
        schema.ANNOTATION_GPUS,
        schema.ANNOTATION_ASSIGNMENTS,
        schema.ANNOTATION_PLACEMENT,
    }
    texts = [DOC.read_text(), notes()] + [
        p.read_text() for p in (ROOT / "examples" / "pods").glob("*.yaml")
    ]
    for text in texts:
        for name in re.findall(r"topo-scheduler\.io/[a-z]+(?:-[a-z]+)*", text.replace("\\.", ".")):
            assert name in known, name
    policies = set(re.findall(r"`(best-effort|nvlink|single-numa)`", DOC.read_text()))
    assert policies == {p.value for p in schema.Placement}
