"""Example workloads: opted in to topo-scheduler, asking for what their names promise."""

from __future__ import annotations

import pytest

from scheduler.core.model import PodInfo
from scheduler.core.topology.schema import ANNOTATION_PLACEMENT, Placement

from ._support import EXAMPLES_DIR, load_yaml_docs, pod_specs

PLACEMENT = ANNOTATION_PLACEMENT
EXPECTED = {  # file -> (GPUs per pod, placement annotation)
    "single-gpu.yaml": (1, None),
    "train-4gpu-nvlink.yaml": (4, "nvlink"),
    "train-8gpu-nvlink.yaml": (8, "nvlink"),
    "indexed-job.yaml": (8, "nvlink"),
}


def _pods(docs: list[dict]) -> list[dict]:
    """Each workload as a Pod object, the way its controller would create it."""
    pods = []
    for o in docs:
        if o["kind"] == "Pod":
            pods.append(o)
        elif "template" in o.get("spec", {}):
            meta = dict(o["spec"]["template"].get("metadata", {}))
            meta.setdefault("name", o["metadata"]["name"] + "-0")
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": meta,
                    "spec": o["spec"]["template"]["spec"],
                }
            )
    return pods


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES_DIR.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_example_opts_in_and_requests_its_gpus(file: str) -> None:
    gpus, placement = EXPECTED[file]
    docs = load_yaml_docs(EXAMPLES_DIR / file)
    specs = list(pod_specs(docs))
    assert specs
    for _, spec in specs:
        assert spec["schedulerName"] == "topo-scheduler"
    for pod in _pods(docs):
        info = PodInfo.from_object(pod)  # the scheduler's own parser reads it
        assert info.scheduler_name == "topo-scheduler"
        assert info.requests.get("nvidia.com/gpu") == gpus
        assert info.annotations.get(PLACEMENT) == placement
        if placement is not None:
            Placement(placement)  # a policy the scheduler knows


def test_indexed_job_workers_find_each_other() -> None:
    docs = load_yaml_docs(EXAMPLES_DIR / "indexed-job.yaml")
    service = next(d for d in docs if d["kind"] == "Service")
    job = next(d for d in docs if d["kind"] == "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] > 1
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    command = " ".join(pod["containers"][0]["command"])
    assert f"--nnodes={spec['completions']}" in command
    assert "$(JOB_COMPLETION_INDEX)" in command
    assert f"{job['metadata']['name']}-0.{service['metadata']['name']}" in command
