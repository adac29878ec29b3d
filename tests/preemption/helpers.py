"""Building clusters for preemption tests and explaining a pod on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scheduler.cli import main
from scheduler.core.topology import ANNOTATION_TOPOLOGY, builtin_topology, format_topology
from tests.builders import node, pod

DGX1 = format_topology(builtin_topology("dgx1-v100"))


def gpu_node(name: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return node(
        name,
        cpu="64",
        memory="512Gi",
        extra={"nvidia.com/gpu": str(gpus)},
        annotations={ANNOTATION_TOPOLOGY: DGX1},
        **kw,
    )


def running(
    name: str,
    node_name: str,
    priority: int,
    requests: dict[str, str] | None = None,
    *,
    gpus: tuple[int, ...] = (),
    start: str = "2026-01-01T00:00:00Z",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A bound, running pod with a priority, a start time and (optionally) its GPUs."""
    req = dict(requests or {})
    notes = dict(annotations or {})
    if gpus:
        req["nvidia.com/gpu"] = str(len(gpus))
        notes["topo-scheduler.io/gpus"] = ",".join(map(str, gpus))
    obj = pod(
        name,
        req,
        node_name=node_name,
        phase="Running",
        annotations=notes,
        namespace=namespace,
        spec={"priority": priority},
    )
    obj["status"]["startTime"] = start
    obj["metadata"]["labels"] = labels or {}
    return obj


def pending(
    name: str,
    priority: int | None,
    requests: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    extra = dict(spec)
    if priority is not None:
        extra["priority"] = priority
    annotations = extra.pop("annotations", None)
    obj = pod(name, requests or {}, spec=extra, annotations=annotations)
    return obj


def explain_json(
    tmp_path: Path, objects: list[dict[str, Any]], preemptor: dict[str, Any], capsys: Any
) -> dict[str, Any]:
    import json

    snap = tmp_path / "snapshot.yaml"
    snap.write_text(yaml.safe_dump_all(objects))
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(preemptor))
    code = main(["explain", "--snapshot", str(snap), "--pod", str(manifest), "--output", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc
