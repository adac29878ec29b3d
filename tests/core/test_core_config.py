"""KubeSchedulerConfiguration: defaults, merging, plugin args, errors; FitError messages."""

from __future__ import annotations

from typing import Any

import pytest
from core_support import cache_of, framework, node, pod, pod_info, profile_config

from plugins import frameworks_for
from plugins.node_resources_fit import MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO, ShapePoint
from scheduler.core.config import ConfigError, default_config, load_config
from scheduler.core.framework import NO_NODES_MESSAGE, fit_error_message
from scheduler.core.model import PodInfo
from scheduler.core.reference import schedule_reference

DEFAULT_SCORES = [
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
]
DEFAULT_FILTERS = [
    "NodeUnschedulable",
    "TaintToleration",
    "NodeAffinity",
    "NodePorts",
    "NodeResourcesFit",
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "NodeMemoryPressure",
]


def _scores(plugins: dict[str, Any] | None = None) -> list[tuple[str, int]]:
    return [(p.name, w) for p, w in framework(plugins).scores]


def _filters(plugins: dict[str, Any] | None = None) -> list[str]:
    return [p.name for p in framework(plugins).filters]


def test_default_profile() -> None:
    profile = default_config().profiles[0]
    assert profile.scheduler_name == "topo-scheduler"
    assert _scores() == DEFAULT_SCORES
    assert _filters() == DEFAULT_FILTERS
    assert framework().weights == dict(DEFAULT_SCORES)


def test_empty_config_is_the_default() -> None:
    assert load_config({}).profiles == default_config().profiles
    assert load_config("").profiles == default_config().profiles


def test_disable_all_scores_with_star() -> None:
    assert _scores({"score": {"disabled": [{"name": "*"}]}}) == []
    assert _scores(
        {
            "score": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "ImageLocality", "weight": 4}],
            }
        }
    ) == [("ImageLocality", 4)]


def test_disable_all_filters_with_star_then_enable_one() -> None:
    got = _filters({"filter": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodePorts"}]}})
    assert got == ["NodePorts"]


def test_reenabling_a_default_moves_it_first_with_the_new_weight() -> None:
    """kube v1 expands MultiPoint defaults after the plugins a point re-configures."""
    got = _scores({"score": {"enabled": [{"name": "NodeAffinity", "weight": 7}]}})
    assert got == [
        ("NodeAffinity", 7),
        ("TaintToleration", 3),
        ("NodeResourcesFit", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
        ("NodeResourcesBalancedAllocation", 1),
        ("ImageLocality", 1),
    ]


def test_reenabled_defaults_keep_the_order_the_point_gives() -> None:
    """kube's expandMultiPointPlugins: the re-configured plugins in the point's own order."""
    got = _filters({"filter": {"enabled": [{"name": "NodeAffinity"}, {"name": "TaintToleration"}]}})
    assert got[:2] == ["NodeAffinity", "TaintToleration"]
    assert len(got) == len(set(got)) == len(_filters({}))


def test_a_weight_over_100_is_kept_as_kube_keeps_it() -> None:
    got = dict(_scores({"score": {"enabled": [{"name": "ImageLocality", "weight": 2**31 - 1}]}}))
    assert got["ImageLocality"] == 2**31 - 1


def test_zero_weight_means_one() -> None:
    got = dict(_scores({"score": {"enabled": [{"name": "TaintToleration", "weight": 0}]}}))
    assert got["TaintToleration"] == 1


def test_disabling_one_default() -> None:
    got = _scores({"score": {"disabled": [{"name": "ImageLocality"}]}})
    assert got == DEFAULT_SCORES[:-1]
    assert "NodePorts" not in _filters({"filter": {"disabled": [{"name": "NodePorts"}]}})


def test_disabled_then_enabled_again_goes_last() -> None:
    got = _scores(
        {
            "score": {
                "disabled": [{"name": "TaintToleration"}],
                "enabled": [{"name": "TaintToleration", "weight": 9}],
            }
        }
    )
    assert got[-1] == ("TaintToleration", 9)
    assert len(got) == len(DEFAULT_SCORES)


def test_multipoint_and_prefilter_points() -> None:
    got = _scores({"multiPoint": {"disabled": [{"name": "ImageLocality"}]}})
    assert ("ImageLocality", 1) not in got
    # as in kube, PreFilter and Filter are separate points: disabling one leaves the other
    fw = framework({"preFilter": {"disabled": [{"name": "NodeAffinity"}]}})
    assert "NodeAffinity" not in [p.name for p in fw.pre_filters]
    assert "NodeAffinity" in [p.name for p in fw.filters]
    fw = framework({"multiPoint": {"disabled": [{"name": "NodeAffinity"}]}})
    assert "NodeAffinity" not in [p.name for p in fw.pre_filters + fw.filters]


def test_plugin_args_reach_plugins() -> None:
    fw = framework(
        plugin_config=[
            {
                "name": "NodeResourcesFit",
                "args": {
                    "scoringStrategy": {
                        "type": "MostAllocated",
                        "resources": [
                            {"name": "cpu", "weight": 2},
                            {"name": "nvidia.com/gpu", "weight": 5},
                        ],
                    },
                    "ignoredResources": ["example.com/foo"],
                    "ignoredResourceGroups": ["acme.io"],
                },
            },
            {
                "name": "NodeResourcesBalancedAllocation",
                "args": {"resources": [{"name": "cpu", "weight": 1}, {"name": "nvidia.com/gpu"}]},
            },
        ]
    )
    fit = next(p for p in fw.filters if p.name == "NodeResourcesFit")
    args = fit.args  # type: ignore[attr-defined]
    assert args.strategy == MOST_ALLOCATED
    assert [(r.name, r.weight) for r in args.resources] == [("cpu", 2), ("nvidia.com/gpu", 5)]
    assert args.ignored_resources == {"example.com/foo"}
    assert args.ignored_resource_groups == {"acme.io"}
    balanced = next(p for p, _ in fw.scores if p.name == "NodeResourcesBalancedAllocation")
    assert [r.name for r in balanced.resources] == ["cpu", "nvidia.com/gpu"]  # type: ignore[attr-defined]


def test_plugin_args_change_the_decision() -> None:
    # Spread (default LeastAllocated) picks the empty node; MostAllocated packs onto the busy one.
    cache = cache_of(
        [node("busy", cpu="8"), node("empty", cpu="8")],
        [pod("e", {"cpu": "4", "memory": "1Gi"}, node_name="busy")],
    )
    p = pod_info("p", {"cpu": "1", "memory": "1Gi"})
    assert framework().schedule(p, cache.snapshot).node == "empty"
    most = framework(
        plugin_config=[
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ]
    )
    assert most.schedule(p, cache.snapshot).node == "busy"


def test_requested_to_capacity_ratio_shape_is_scaled() -> None:
    fw = framework(
        plugin_config=[
            {
                "name": "NodeResourcesFit",
                "args": {
                    "scoringStrategy": {
                        "type": "RequestedToCapacityRatio",
                        "requestedToCapacityRatio": {
                            "shape": [
                                {"utilization": 0, "score": 0},
                                {"utilization": 100, "score": 10},
                            ]
                        },
                    }
                },
            }
        ]
    )
    fit = next(p for p in fw.filters if p.name == "NodeResourcesFit")
    assert fit.args.strategy == REQUESTED_TO_CAPACITY_RATIO  # type: ignore[attr-defined]
    assert fit.args.shape == (ShapePoint(0, 0), ShapePoint(100, 100))  # type: ignore[attr-defined]


def test_empty_resources_list_means_the_default_set() -> None:
    fw = framework(
        plugin_config=[
            {
                "name": "NodeResourcesFit",
                "args": {"scoringStrategy": {"type": "LeastAllocated", "resources": []}},
            },
            {"name": "NodeResourcesBalancedAllocation", "args": {"resources": []}},
        ]
    )
    fit = next(p for p in fw.filters if p.name == "NodeResourcesFit")
    assert [r.name for r in fit.args.resources] == ["cpu", "memory"]  # type: ignore[attr-defined]
    balanced = next(p for p, _ in fw.scores if p.name == "NodeResourcesBalancedAllocation")
    assert [r.name for r in balanced.resources] == ["cpu", "memory"]  # type: ignore[attr-defined]


def _fit_args(args: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "NodeResourcesFit", "args": args}]


BAD_CONFIGS: list[tuple[str, dict[str, Any] | str, str]] = [
    (
        "fit resource weight over 100",
        profile_config(
            plugin_config=_fit_args(
                {
                    "scoringStrategy": {
                        "type": "LeastAllocated",
                        "resources": [
                            {"name": "cpu", "weight": 1},
                            {"name": "memory", "weight": 101},
                        ],
                    }
                }
            )
        ),
        "profiles[0].pluginConfig[0].args.scoringStrategy.resources[1].weight: "
        "must be between 1 and 100",
    ),
    (
        "fit resource weight negative",
        profile_config(
            plugin_config=_fit_args(
                {
                    "scoringStrategy": {
                        "type": "MostAllocated",
                        "resources": [{"name": "memory", "weight": -1}],
                    }
                }
            )
        ),
        "profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight: "
        "must be between 1 and 100",
    ),
    (
        "unknown strategy",
        profile_config(plugin_config=_fit_args({"scoringStrategy": {"type": "Bogus"}})),
        'profiles[0].pluginConfig[0].args.scoringStrategy.type: Unsupported value: "Bogus"',
    ),
    (
        "unknown args field",
        profile_config(plugin_config=_fit_args({"bogus": 1})),
        'profiles[0].pluginConfig[0].args.bogus: unknown field "bogus"',
    ),
    (
        "shape required",
        profile_config(
            plugin_config=_fit_args({"scoringStrategy": {"type": "RequestedToCapacityRatio"}})
        ),
        "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape: "
        "Required value",
    ),
    (
        "shape unsorted",
        profile_config(
            plugin_config=_fit_args(
                {
                    "scoringStrategy": {
                        "type": "RequestedToCapacityRatio",
                        "requestedToCapacityRatio": {
                            "shape": [
                                {"utilization": 50, "score": 1},
                                {"utilization": 50, "score": 2},
                            ]
                        },
                    }
                }
            )
        ),
        "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[1]"
        ".utilization: utilization values must be sorted in increasing order",
    ),
    (
        "shape score over 10",
        profile_config(
            plugin_config=_fit_args(
                {
                    "scoringStrategy": {
                        "type": "RequestedToCapacityRatio",
                        "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 11}]},
                    }
                }
            )
        ),
        "profiles[0].pluginConfig[0].args.scoringStrategy.requestedToCapacityRatio.shape[0]"
        ".score: must be between 0 and 10",
    ),
    (
        "ignored resource group with a slash",
        profile_config(plugin_config=_fit_args({"ignoredResourceGroups": ["a/b"]})),
        "profiles[0].pluginConfig[0].args.ignoredResourceGroups[0]: resource group name can't "
        "contain '/'",
    ),
    (
        "balanced allocation weight must be 1",
        profile_config(
            plugin_config=[
                {
                    "name": "NodeResourcesBalancedAllocation",
                    "args": {
                        "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]
                    },
                }
            ]
        ),
        "profiles[0].pluginConfig[0].args.resources[1].weight: must be 1",
    ),
    (
        "balanced allocation duplicate resource",
        profile_config(
            plugin_config=[
                {
                    "name": "NodeResourcesBalancedAllocation",
                    "args": {"resources": [{"name": "cpu"}, {"name": "cpu"}]},
                }
            ]
        ),
        'profiles[0].pluginConfig[0].args.resources[1].name: Duplicate value: "cpu"',
    ),
    (
        "args for a plugin without args",
        profile_config(plugin_config=[{"name": "TaintToleration", "args": {"x": 1}}]),
        'profiles[0].pluginConfig[0].args.x: unknown field "x"',
    ),
    (
        "unregistered pluginConfig",
        profile_config(plugin_config=[{"name": "Nope", "args": {}}]),
        "profiles[0].pluginConfig[0].name: plugin 'Nope' is not registered",
    ),
    (
        "unregistered score plugin",
        profile_config({"score": {"enabled": [{"name": "Bogus"}]}}),
        "profiles[0].plugins.score: plugin 'Bogus' is not registered",
    ),
    (
        "score weight over int32",
        profile_config({"score": {"enabled": [{"name": "ImageLocality", "weight": 2**31}]}}),
        "profiles[0].plugins.score.enabled[0].weight: must be at most 2,147,483,647",
    ),
    (
        "negative score weight",
        profile_config({"score": {"enabled": [{"name": "ImageLocality", "weight": -2}]}}),
        "profiles[0].plugins.score.enabled[0].weight: must be a non-negative integer",
    ),
    (
        "star in enabled",
        profile_config({"score": {"enabled": [{"name": "*"}]}}),
        "profiles[0].plugins.score.enabled[0].name: '*' can only be used in disabled",
    ),
    (
        "plugin at a point it does not implement",
        {"profiles": [{"plugins": {"reserve": {"enabled": [{"name": "NodePorts"}]}}}]},
        'profiles[0].plugins.reserve: plugin "NodePorts" does not extend ReservePlugin plugin',
    ),
    (
        "two queue sort plugins",
        {
            "profiles": [
                {"plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}, {"name": "X"}]}}}
            ]
        },
        "profiles[0].plugins.queueSort: plugin 'X' is not registered",
    ),
    (
        "no bind plugin",
        {"profiles": [{"plugins": {"bind": {"disabled": [{"name": "*"}]}}}]},
        "profiles[0].plugins.bind: at least one bind plugin is needed",
    ),
    (
        "unknown extension point",
        {"profiles": [{"plugins": {"sort": {}}}]},
        'profiles[0].plugins.sort: unknown field "sort"',
    ),
    (
        "duplicate profile",
        {"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]},
        'profiles[1].schedulerName: Duplicate value: "a"',
    ),
    (
        "duplicate pluginConfig",
        {"profiles": [{"pluginConfig": [{"name": "ImageLocality"}, {"name": "ImageLocality"}]}]},
        'profiles[0].pluginConfig[1]: Duplicate value: "ImageLocality"',
    ),
    (
        "second profile without a name",
        {"profiles": [{"schedulerName": "gpu"}, {}]},
        "profiles[1].schedulerName: Required value",
    ),
    (
        "wrong apiVersion",
        {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"},
        "apiVersion: must be kubescheduler.config.k8s.io/v1",
    ),
    ("wrong kind", {"kind": "Pod"}, "kind: must be KubeSchedulerConfiguration"),
    (
        "percentage out of range",
        {"percentageOfNodesToScore": 101},
        "percentageOfNodesToScore: not in valid range [0-100]",
    ),
    ("extenders", {"extenders": [{"urlPrefix": "http://x"}]}, "extenders: not supported"),
    ("unknown top-level field", {"profile": []}, 'profile: unknown field "profile"'),
    ("not YAML", "profiles: [", "config: not valid YAML"),
    ("profiles not a list", {"profiles": {"a": 1}}, "profiles: must be a list, got dict"),
]


@pytest.mark.parametrize(
    ("config", "message"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_config_errors_name_the_field(config: dict[str, Any] | str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        frameworks_for(load_config(config))
    assert str(err.value).startswith(message), str(err.value)


def test_yaml_config_loads() -> None:
    text = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: topo-scheduler
  plugins:
    filter:
      disabled: [{name: GPUTopology}]
    score:
      disabled: [{name: GPUTopology}]
      enabled: [{name: ImageLocality, weight: 4}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy: {type: MostAllocated}
"""
    fw = frameworks_for(load_config(text))["topo-scheduler"]
    assert fw.weights["ImageLocality"] == 4
    fit = next(p for p in fw.filters if p.name == "NodeResourcesFit")
    assert fit.args.strategy == MOST_ALLOCATED  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- FitError


def test_fit_error_message_format() -> None:
    counts = {
        "Insufficient cpu": 2,
        "node(s) had untolerated taint {a: b}": 10,
        "Too many pods": 1,
        "never": 0,
    }
    # Entries are "<count> <reason>" sorted as strings: "10 ..." sorts before "2 ...".
    assert fit_error_message(13, counts) == (
        "0/13 nodes are available: 1 Too many pods, 10 node(s) had untolerated taint {a: b}, "
        "2 Insufficient cpu."
    )
    assert fit_error_message(0, counts) == NO_NODES_MESSAGE == "no nodes available to schedule pods"


def test_schedule_reports_every_reason_of_the_first_failing_filter() -> None:
    fw = framework()
    cache = cache_of(
        [
            node("a", cpu="1", memory="1Gi"),
            node("b", cpu="1", memory="1Gi"),
            node("c", unschedulable=True),
            node("d", taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]),
            node("e", cpu="1", memory="1Gi", pods=1),
        ],
        [pod("e1", node_name="e")],
    )
    p = pod_info("p", {"cpu": "2", "memory": "2Gi"})
    result = fw.schedule(p, cache.snapshot)
    assert result.node is None
    assert result.message == (
        "0/5 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint {gpu: yes}, "
        "1 node(s) were unschedulable, 3 Insufficient cpu, 3 Insufficient memory."
    )
    slot = cache.snapshot.slot("e")
    assert slot is not None
    assert result.node_reasons(slot) == ["Too many pods", "Insufficient cpu", "Insufficient memory"]
    ref = schedule_reference(fw, p, cache.snapshot)
    assert ref.node is None
    assert ref.reasons == {
        "a": ["Insufficient cpu", "Insufficient memory"],
        "b": ["Insufficient cpu", "Insufficient memory"],
        "c": ["node(s) were unschedulable"],
        "d": ["node(s) had untolerated taint {gpu: yes}"],
        "e": ["Too many pods", "Insufficient cpu", "Insufficient memory"],
    }


def test_schedule_with_no_nodes() -> None:
    result = framework().schedule(pod_info("p"), cache_of([]).snapshot)
    assert result.node is None
    assert result.message == NO_NODES_MESSAGE


def test_best_effort_pod_avoids_memory_pressure() -> None:
    cache = cache_of([node("a", memory_pressure=True), node("b", memory_pressure=True)])
    result = framework().schedule(PodInfo.from_object(pod("p", containers=[])), cache.snapshot)
    assert result.message == "0/2 nodes are available: 2 node(s) had memory pressure."
    burstable = framework().schedule(pod_info("q", {"cpu": "1"}), cache.snapshot)
    assert burstable.node == "a"


def test_ties_go_to_the_first_node_name() -> None:
    cache = cache_of([node("c"), node("a"), node("b")])
    assert framework().schedule(pod_info("p", {"cpu": "1"}), cache.snapshot).node == "a"
