"""Parsing of plugin args from pluginConfig, with errors that name the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.core.config import FIELDS, ConfigError, strict_mapping

__all__ = ["ResourceSpec", "resource_specs", "string_list"]


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int


def string_list(raw: Any, path: str) -> tuple[str, ...]:
    return FIELDS.string_list(raw, path)


def resource_specs(
    raw: Any, path: str, default: tuple[ResourceSpec, ...]
) -> tuple[ResourceSpec, ...]:
    """A `resources: [{name, weight}]` list; weights 1..100 (0 or none means 1), as in kube.

    Missing or empty means the default set, as kube's v1 defaulting does.
    """
    if raw is None or (isinstance(raw, list) and not raw):
        return default
    specs = []
    seen: set[str] = set()
    for i, item in enumerate(FIELDS.list(raw, path)):
        item_path = f"{path}[{i}]"
        entry = strict_mapping(item, item_path, {"name", "weight"})
        name = FIELDS.name(entry.get("name"), f"{item_path}.name")
        if name in seen:
            raise ConfigError(f'{item_path}.name: Duplicate value: "{name}"')
        seen.add(name)
        weight = entry.get("weight") or 1  # kube's v1 defaulting: a zero weight means 1
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise ConfigError(f"{item_path}.weight: must be between 1 and 100, got {weight!r}")
        specs.append(ResourceSpec(name, weight))
    return tuple(specs)
