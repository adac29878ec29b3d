"""The ConfigMap the chart renders is read by the scheduler's own configuration loader."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest
import yaml

from plugins import frameworks_for
from scheduler.core.config import SchedulerConfiguration, default_config, load_config
from scheduler.core.framework import Framework

from ._support import CHART_DIR, MANIFESTS_DIR, VALUE_SETS, find, load_yaml_docs, objects


def _loaded(values: dict[str, Any] | None = None):
    text = find(objects(values), "ConfigMap")["data"]["config.yaml"]
    return load_config(text, origin="configmap")


def _profile(values: dict[str, Any] | None = None) -> tuple[SchedulerConfiguration, Framework]:
    """The loaded config and the framework the scheduler builds for the chart's profile."""
    with helm_python.Chart.load(str(CHART_DIR)) as chart:
        merged = chart.merge_values(values)
    config = _loaded(values)
    name = merged["scheduler"]["schedulerName"]
    assert config.profile(name) is not None
    return config, frameworks_for(config)[name]


def _filters(framework: Framework) -> list[str]:
    return [plugin.name for plugin in framework.filters]


def test_default_configmap_loads_with_the_chart_weights() -> None:
    defaults = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["scheduler"]["config"]
    config, framework = _profile()
    assert len(config.profiles) == 1
    assert framework.weights == defaults["scoreWeights"]
    assert config.profiles[0].plugin_args["NodeResourcesFit"] == (
        defaults["pluginConfig"][0]["args"]
    )
    assert config.percentage_of_nodes_to_score is None


def test_chart_defaults_equal_the_schedulers_defaults() -> None:
    """Installing the chart changes nothing against running the scheduler without a config."""
    _, framework = _profile()
    default = frameworks_for(default_config())["topo-scheduler"]
    assert framework.profile == default.profile
    assert _filters(framework) == _filters(default)
    assert framework.weights == default.weights


@pytest.mark.parametrize(
    ("expression", "plugin", "weight"),
    [
        ("scheduler.config.scoreWeights.GPUTopology=20", "GPUTopology", 20),
        ("scheduler.config.scoreWeights.ImageLocality=7", "ImageLocality", 7),
        ("scheduler.config.scoreWeights.NodeResourcesFit=100", "NodeResourcesFit", 100),
    ],
)
def test_weight_set_with_helm_set_reaches_the_scheduler(
    expression: str, plugin: str, weight: int
) -> None:
    _, before = _profile()
    _, after = _profile(helm_python.parse_set_string(expression))
    assert after.weights == before.weights | {plugin: weight}
    assert _filters(after) == _filters(before)


def test_customised_values_reach_the_scheduler() -> None:
    values = VALUE_SETS["customised"]
    config, framework = _profile(values)
    assert framework.profile == "gpu-topology"
    assert config.percentage_of_nodes_to_score == 50
    assert "NodePorts" not in _filters(framework)
    scores = framework.weights
    assert "NodeResourcesBalancedAllocation" not in scores
    assert scores["GPUTopology"] == 20 and scores["ImageLocality"] == 2
    assert (
        config.profiles[0].plugin_args["NodeResourcesFit"]
        == values["scheduler"]["config"]["pluginConfig"][0]["args"]
    )


def test_disabling_every_default_filter_is_passed_through() -> None:
    _, framework = _profile({"scheduler": {"config": {"filterDisabled": ["*"]}}})
    assert _filters(framework) == []


def test_plain_manifests_configmap_loads() -> None:
    docs = load_yaml_docs(MANIFESTS_DIR / "topo-scheduler.yaml")
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    config = load_config(configmap["data"]["config.yaml"], origin="manifests")
    assert config.profile("topo-scheduler") is not None
