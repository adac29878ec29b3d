"""KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1): load, default, validate.

The format is kube-scheduler's, so operators reuse what they know: profiles with a
schedulerName, plugins enabled/disabled per extension point with weights (``'*'`` disables
every default at that point), and pluginConfig args. Errors name the field, e.g.
``profiles[0].plugins.score.enabled[1].weight: must be a non-negative integer``. Plugin args
are validated by the plugin's own factory when the profile is built (`build_frameworks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.decode import FieldError, Fields
from scheduler.core.framework import (
    POINTS,
    Allocator,
    Framework,
    Plugin,
    Registry,
)
from scheduler.core.safeload import InputError, load_yaml

__all__ = [
    "API_VERSION",
    "DEFAULT_PLUGINS",
    "DEFAULT_SCHEDULER_NAME",
    "KIND",
    "ConfigError",
    "PluginSet",
    "Profile",
    "SchedulerConfiguration",
    "build_frameworks",
    "default_config",
    "load_config",
    "strict_mapping",
]

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "topo-scheduler"

# The default plugins, enabled at every extension point they implement (kube v1's
# MultiPoint defaults for the plugins we share, in kube's order, then ours), with weights.
DEFAULT_PLUGINS: tuple[tuple[str, int], ...] = (
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    # kube puts DynamicResources right before DefaultPreemption
    ("DynamicResources", 0),
    ("NodeMemoryPressure", 0),
    ("DefaultPreemption", 0),
    # scheduler-plugins' ElasticQuotas; a no-op without any (docs/quotas.md)
    ("CapacityScheduling", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("GPUTopology", 10),
    ("DefaultBinder", 0),
)
_KNOWN_POINTS = {"multiPoint", *POINTS}


class ConfigError(FieldError):
    """An invalid scheduler configuration; the message starts with the field path."""


@dataclass(frozen=True, slots=True)
class PluginRef:
    name: str
    weight: int = 0


MAX_WEIGHT = 2**31 - 1
"""A score weight's ceiling (kube's int32 field): 100 x the weights of every plugin stays far
inside int64, so the total score cannot overflow."""


@dataclass(frozen=True, slots=True)
class PluginSet:
    enabled: tuple[PluginRef, ...] = ()
    disabled: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Profile:
    scheduler_name: str
    points: Mapping[str, PluginSet] = field(default_factory=dict)
    plugin_args: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    args_path: Mapping[str, str] = field(default_factory=dict)
    index: int = 0

    def expand(self, point: str, implements: Callable[[str], bool]) -> list[PluginRef]:
        """The plugins enabled at `point`, in kube v1's order (expandMultiPointPlugins).

        MultiPoint is the defaults merged with the profile's `multiPoint` set; of those, the
        ones implementing `point` and not disabled there are enabled. Plugins the point
        itself enables come first, in the point's order, when they re-configure a MultiPoint
        one (taking the point's weight), then the other MultiPoint plugins, then plugins only
        the point names. ``disabled: [{name: '*'}]`` at a point leaves only what it enables.
        """
        multi = _merge_set([PluginRef(n, w) for n, w in DEFAULT_PLUGINS],
                           self.points.get("multiPoint"))  # fmt: skip
        own = self.points.get(point) or PluginSet()
        if "*" in own.disabled:
            return list(own.enabled)
        named = {ref.name: ref for ref in own.enabled}
        overrides: list[PluginRef] = []
        others: list[PluginRef] = []
        for ref in multi:
            if ref.name in own.disabled or not implements(ref.name):
                continue
            if ref.name in named:
                overrides.append(named[ref.name])
            else:
                others.append(ref)
        order = {ref.name: i for i, ref in enumerate(own.enabled)}
        overrides.sort(key=lambda ref: order[ref.name])  # as the point lists them
        taken = {ref.name for ref in overrides}
        return overrides + others + [ref for ref in own.enabled if ref.name not in taken]


@dataclass(frozen=True, slots=True)
class SchedulerConfiguration:
    profiles: tuple[Profile, ...]
    percentage_of_nodes_to_score: int | None = None
    # kube's podInitialBackoffSeconds / podMaxBackoffSeconds for the scheduling queue.
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0

    def profile(self, scheduler_name: str | None) -> Profile | None:
        """The profile for a pod's schedulerName; None picks the first profile."""
        if scheduler_name is None:
            return self.profiles[0]
        for profile in self.profiles:
            if profile.scheduler_name == scheduler_name:
                return profile
        return None


def _merge_set(defaults: list[PluginRef], custom: PluginSet | None) -> list[PluginRef]:
    """kube's mergePluginSet: disabling removes a default (``'*'`` all of them), enabling
    a default re-configures it in place, other enabled plugins follow in order."""
    if custom is None:
        return list(defaults)
    result = [] if "*" in custom.disabled else [
        ref for ref in defaults if ref.name not in custom.disabled
    ]  # fmt: skip
    positions = {ref.name: i for i, ref in enumerate(result)}
    for ref in custom.enabled:
        if ref.name in positions:
            result[positions[ref.name]] = ref
        else:
            positions[ref.name] = len(result)
            result.append(ref)
    return result


def default_config() -> SchedulerConfiguration:
    """One profile, `topo-scheduler`, with the default plugins and weights."""
    return SchedulerConfiguration(profiles=(Profile(DEFAULT_SCHEDULER_NAME),))


# ---------------------------------------------------------------------------- loading


FIELDS = Fields(ConfigError)
"""The decoder of the configuration and of plugin args (kube's strict decoding)."""
strict_mapping = FIELDS.strict


def _plugin_set(raw: Any, path: str) -> PluginSet:
    data = strict_mapping(raw, path, {"enabled", "disabled"})
    enabled = []
    for i, item in enumerate(FIELDS.list(data.get("enabled"), f"{path}.enabled")):
        item_path = f"{path}.enabled[{i}]"
        entry = strict_mapping(item, item_path, {"name", "weight"})
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{item_path}.name: must be a non-empty string")
        if name == "*":
            raise ConfigError(f"{item_path}.name: '*' can only be used in disabled")
        weight = entry.get("weight", 0)
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise ConfigError(f"{item_path}.weight: must be a non-negative integer, got {weight!r}")
        if weight > MAX_WEIGHT:  # kube's field is an int32; no other bound
            raise ConfigError(f"{item_path}.weight: must be at most {MAX_WEIGHT:,}, got {weight}")
        enabled.append(PluginRef(name, weight))
    names = [ref.name for ref in enabled]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"{path}.enabled[{i}].name: plugin {name!r} is enabled twice")
    disabled = []
    for i, item in enumerate(FIELDS.list(data.get("disabled"), f"{path}.disabled")):
        item_path = f"{path}.disabled[{i}]"
        entry = strict_mapping(item, item_path, {"name", "weight"})
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{item_path}.name: must be a non-empty string")
        disabled.append(name)
    return PluginSet(tuple(enabled), tuple(disabled))


def _profile(raw: Any, index: int, only: bool) -> Profile:
    """One profile; the scheduler's name is filled in only for the only profile, as kube's
    defaulting does (several profiles must each name theirs)."""
    path = f"profiles[{index}]"
    data = strict_mapping(
        raw, path, {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}
    )
    _percentage(data.get("percentageOfNodesToScore"), f"{path}.percentageOfNodesToScore")
    if "schedulerName" not in data and not only:
        raise ConfigError(f"{path}.schedulerName: Required value")
    name = data.get("schedulerName", DEFAULT_SCHEDULER_NAME)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{path}.schedulerName: must be a non-empty string")
    points: dict[str, PluginSet] = {}
    plugins = FIELDS.mapping(data.get("plugins"), f"{path}.plugins")
    for point, value in plugins.items():
        point_path = f"{path}.plugins.{point}"
        if point not in _KNOWN_POINTS:
            raise ConfigError(f'{point_path}: unknown field "{point}"')
        points[point] = _plugin_set(value, point_path)
    args: dict[str, Mapping[str, Any] | None] = {}
    args_path: dict[str, str] = {}
    for i, item in enumerate(FIELDS.list(data.get("pluginConfig"), f"{path}.pluginConfig")):
        item_path = f"{path}.pluginConfig[{i}]"
        entry = strict_mapping(item, item_path, {"name", "args"})
        plugin = entry.get("name")
        if not isinstance(plugin, str) or not plugin:
            raise ConfigError(f"{item_path}.name: must be a non-empty string")
        if plugin in args:
            raise ConfigError(f'{item_path}: Duplicate value: "{plugin}"')
        plugin_args = FIELDS.mapping(entry.get("args"), f"{item_path}.args")
        args[plugin] = {k: v for k, v in plugin_args.items() if k not in ("apiVersion", "kind")}
        args_path[plugin] = f"{item_path}.args"
    return Profile(name, points, args, args_path, index)


def load_config(source: str | Mapping[str, Any], origin: str = "config") -> SchedulerConfiguration:
    """Parse and validate a KubeSchedulerConfiguration from YAML text or a mapping."""
    if isinstance(source, str):
        try:
            data = load_yaml(source, origin)
        except InputError as exc:
            raise ConfigError(str(exc)) from None
    else:
        data = source
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{origin}: must be a mapping, got {type(data).__name__}")
    FIELDS.strict(
        data,
        "",
        {"apiVersion", "kind", "profiles", "percentageOfNodesToScore", "leaderElection",
         "clientConnection", "parallelism", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
         "extenders", "delayCacheUntilActive", "enableProfiling", "enableContentionProfiling"},
    )  # fmt: skip
    api_version = data.get("apiVersion", API_VERSION)
    if api_version != API_VERSION:
        raise ConfigError(f"apiVersion: must be {API_VERSION}, got {api_version!r}")
    kind = data.get("kind", KIND)
    if kind != KIND:
        raise ConfigError(f"kind: must be {KIND}, got {kind!r}")
    if data.get("extenders"):
        raise ConfigError("extenders: not supported by topo-scheduler")
    percentage = _percentage(data.get("percentageOfNodesToScore"), "percentageOfNodesToScore")
    initial = _positive_int(data.get("podInitialBackoffSeconds", 1), "podInitialBackoffSeconds")
    maximum = _positive_int(data.get("podMaxBackoffSeconds", 10), "podMaxBackoffSeconds")
    if maximum < initial:
        raise ConfigError(
            f"podMaxBackoffSeconds: must be greater than or equal to podInitialBackoffSeconds "
            f"({initial}), got {maximum}"
        )
    # Accepted for kube compatibility, validated by type; `run` takes these from its flags
    # (leader election, API client) or does not need them (one scheduling thread).
    for key in ("leaderElection", "clientConnection"):
        FIELDS.mapping(data.get(key), key)
    for key in ("enableProfiling", "enableContentionProfiling", "delayCacheUntilActive"):
        if key in data and not isinstance(data[key], bool):
            raise ConfigError(f"{key}: must be a boolean, got {data[key]!r}")
    if "parallelism" in data:
        _positive_int(data["parallelism"], "parallelism")
    raw_profiles = FIELDS.list(data.get("profiles"), "profiles")
    only = len(raw_profiles) == 1
    profiles = tuple(_profile(p, i, only) for i, p in enumerate(raw_profiles)) or (
        Profile(DEFAULT_SCHEDULER_NAME),
    )
    names = [p.scheduler_name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f'profiles[{i}].schedulerName: Duplicate value: "{name}"')
    return SchedulerConfiguration(profiles, percentage, float(initial), float(maximum))


def _percentage(value: Any, path: str) -> int | None:
    valid = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100
    if value is not None and not valid:
        raise ConfigError(f"{path}: not in valid range [0-100], got {value!r}")
    return value if valid else None


def _positive_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{path}: must be greater than 0, got {value!r}")
    return value


def build_frameworks(config: SchedulerConfiguration, registry: Registry) -> dict[str, Framework]:
    """One framework per profile; plugin args are validated here, errors naming the field."""
    frameworks = {p.scheduler_name: _build(p, registry) for p in config.profiles}
    sorts = {fw.queue_sort.name for fw in frameworks.values() if fw.queue_sort is not None}
    if len(sorts) > 1:  # one queue serves every profile
        raise ConfigError(
            f"profiles[*].plugins.queueSort: queueSort must be the same for all profiles, "
            f"got {', '.join(sorted(sorts))}"
        )
    return frameworks


def _build(profile: Profile, registry: Registry) -> Framework:
    """Instantiate a profile's plugins once each and wire them to their extension points.

    As kube's NewFramework: a MultiPoint plugin is enabled at every point it implements; a
    plugin named at a point it does not implement is an error; Score weights of zero mean
    one; exactly one QueueSort and at least one Bind plugin.
    """
    prefix = f"profiles[{profile.index}]"
    for name, path in profile.args_path.items():
        if name not in registry:
            raise ConfigError(f"{path.rsplit('.', 1)[0]}.name: plugin {name!r} is not registered")
    instances: dict[str, Plugin] = {}

    def get(name: str, point: str) -> Plugin:
        if name not in instances:
            factory = registry.get(name)
            if factory is None:
                raise ConfigError(f"{prefix}.plugins.{point}: plugin {name!r} is not registered")
            path = profile.args_path.get(name, f"{prefix}.pluginConfig[{name}].args")
            instances[name] = factory(profile.plugin_args.get(name), path)
        return instances[name]

    enabled: dict[str, list[tuple[Any, int]]] = {}
    for point, protocol in POINTS.items():

        def implements(name: str, protocol: type = protocol) -> bool:
            return isinstance(get(name, "multiPoint"), protocol)

        wired = []
        for ref in profile.expand(point, implements):
            plugin = get(ref.name, point)
            if not isinstance(plugin, protocol):
                raise ConfigError(
                    f'{prefix}.plugins.{point}: plugin "{ref.name}" does not extend '
                    f"{protocol.__name__} plugin"
                )
            wired.append((plugin, ref.weight))
        enabled[point] = wired
    if len(enabled["queueSort"]) != 1:
        raise ConfigError(
            f"{prefix}.plugins.queueSort: only one queue sort plugin can be enabled, "
            f"got {len(enabled['queueSort'])}"
        )
    if not enabled["bind"]:
        raise ConfigError(f"{prefix}.plugins.bind: at least one bind plugin is needed")

    def plugins(point: str) -> list[Any]:
        return [plugin for plugin, _ in enabled[point]]

    filters = plugins("filter")
    return Framework(
        profile.scheduler_name,
        pre_enqueue=plugins("preEnqueue"),
        queue_sort=plugins("queueSort")[0],
        pre_filters=plugins("preFilter"),
        filters=filters,
        post_filters=plugins("postFilter"),
        pre_scores=plugins("preScore"),
        # A weight of zero means the default weight of one, as in kube-scheduler.
        scores=[(plugin, weight or 1) for plugin, weight in enabled["score"]],
        # the plugin that judged a node's devices picks them on the chosen node
        allocators=[p for p in filters if isinstance(p, Allocator)],
        reserve=plugins("reserve"),
        permit=plugins("permit"),
        pre_bind=plugins("preBind"),
        bind=plugins("bind"),
        post_bind=plugins("postBind"),
    )
