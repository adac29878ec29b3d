"""The agent's ValidatingAdmissionPolicy, evaluated as the API server evaluates it.

The chart's CEL expressions run (cel-python) on the inputs kube-apiserver gives a policy: the
AdmissionRequest as `request`, the Node after the patch as `object`, the stored Node as
`oldObject`, and `variables`; the policy admits a request when its matchConstraints or
matchConditions do not match, or every validation evaluates to true (an evaluation error
denies: failurePolicy Fail).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import celpy
import pytest

from scheduler.core.topology.schema import ANNOTATION_ASSIGNMENTS, ANNOTATION_TOPOLOGY

from ._support import NAMESPACE, VALUE_SETS, find, objects

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies `application/merge-patch+json`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def node(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "10",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                ANNOTATION_TOPOLOGY: '{"version": 1}',
                **(annotations or {}),
            },
        },
        "spec": {"podCIDR": "10.0.1.0/24", "taints": []},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }


@dataclass
class Verdict:
    allowed: bool
    matched: bool
    messages: list[str]


class Policy:
    """One rendered ValidatingAdmissionPolicy, compiled once."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.env = celpy.Environment()
        spec = obj["spec"]
        assert spec["failurePolicy"] == "Fail"
        self.rules = spec["matchConstraints"]["resourceRules"]
        self.conditions = [self._compile(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec["variables"]]
        self.validations = [
            (self._compile(v["expression"]), v["message"]) for v in spec["validations"]
        ]

    def _compile(self, expression: str) -> Any:
        return self.env.program(self.env.compile(expression))

    def _matches(self, request: dict[str, Any]) -> bool:
        res = request["resource"]
        resource = res["resource"] + (
            f"/{request['subResource']}" if request.get("subResource") else ""
        )
        return any(
            res["group"] in r["apiGroups"]
            and res["version"] in r["apiVersions"]
            and request["operation"] in r["operations"]
            and resource in r["resources"]
            for r in self.rules
        )

    def admit(self, request: dict[str, Any], obj: Any, old: Any) -> Verdict:
        if not self._matches(request):
            return Verdict(True, False, [])
        activation: dict[str, Any] = {
            "request": celpy.json_to_cel(request),
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(old),
        }
        if not all(bool(condition.evaluate(activation)) for condition in self.conditions):
            return Verdict(True, False, [])
        variables: dict[Any, Any] = {}
        for name, program in self.variables:
            try:
                variables[celpy.celtypes.StringType(name)] = program.evaluate(
                    {**activation, "variables": celpy.celtypes.MapType(variables)}
                )
            except celpy.CELEvalError:
                pass  # referencing it errors below, as a lazily evaluated failing variable
        activation["variables"] = celpy.celtypes.MapType(variables)
        messages = []
        for program, message in self.validations:
            try:
                ok = program.evaluate(activation)
            except celpy.CELEvalError as exc:
                messages.append(f"error: {exc}")
                continue
            if isinstance(ok, celpy.CELEvalError) or not isinstance(ok, celpy.celtypes.BoolType):
                messages.append(f"error: {ok}")
            elif not bool(ok):
                messages.append(message)
        return Verdict(not messages, True, messages)


def _policy_and_agent(values: dict[str, Any] | None = None) -> tuple[Policy, str]:
    objs = objects(values)
    policy = find(objs, "ValidatingAdmissionPolicy")
    binding = find(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }
    daemonset = find(objs, "DaemonSet")
    sa = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    return Policy(policy), f"system:serviceaccount:{daemonset['metadata']['namespace']}:{sa}"


@pytest.fixture(scope="module")
def policy_agent() -> tuple[Policy, str]:
    return _policy_and_agent()


def request(
    user: str,
    name: str,
    operation: str = "UPDATE",
    sub_resource: str = "",
    bound_node: str | None = None,
) -> dict[str, Any]:
    """The AdmissionRequest fields a policy sees (`request` in CEL)."""
    extra: dict[str, list[str]] = {}
    if bound_node is not None:
        extra = {
            NODE_NAME_EXTRA: [bound_node],
            "authentication.kubernetes.io/node-uid": [f"uid-{bound_node}"],
            "authentication.kubernetes.io/pod-name": ["topo-scheduler-agent-x7k2p"],
            "authentication.kubernetes.io/pod-uid": ["5b0c0ff0-0000-4000-8000-000000000001"],
        }
    return {
        "kind": {"group": "", "version": "v1", "kind": "Node"},
        "resource": {"group": "", "version": "v1", "resource": "nodes"},
        # the API server leaves an empty subResource out (omitempty), as a policy sees it
        **({"subResource": sub_resource} if sub_resource else {}),
        "requestKind": {"group": "", "version": "v1", "kind": "Node"},
        "requestResource": {"group": "", "version": "v1", "resource": "nodes"},
        "name": name,
        "namespace": "",
        "operation": operation,
        "userInfo": {
            "username": user,
            "uid": "8c6c5a1e-0000-4000-8000-000000000000",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            **({"extra": extra} if extra else {}),
        },
        "dryRun": False,
    }


def patch_node(
    policy: Policy, user: str, target: str, patch: dict[str, Any], bound_node: str | None
) -> Verdict:
    old = node(target)
    new = merge_patch(old, patch)
    new["status"] = old["status"]  # the Node strategy keeps the stored status on an update
    return policy.admit(request(user, target, bound_node=bound_node), new, old)


def annotations(values: dict[str, str | None]) -> dict[str, Any]:
    return {"metadata": {"annotations": values}}


def test_agent_may_change_its_own_nodes_topo_scheduler_annotations(
    policy_agent: tuple[Policy, str],
) -> None:
    policy, agent = policy_agent
    for patch in (
        annotations({ANNOTATION_TOPOLOGY: '{"version": 1, "gpus": []}'}),
        annotations({ANNOTATION_ASSIGNMENTS: '{"pod-uid": [0, 1]}'}),
        annotations({ANNOTATION_TOPOLOGY: None}),  # the agent removes what it cannot read
    ):
        verdict = patch_node(policy, agent, "gpu-1", patch, bound_node="gpu-1")
        assert verdict.matched and verdict.allowed, (patch, verdict.messages)


@pytest.mark.parametrize(
    ("case", "target", "patch", "message"),
    [
        ("another node", "gpu-2", annotations({ANNOTATION_TOPOLOGY: "{}"}), "bound to"),
        ("labels", "gpu-1", {"metadata": {"labels": {"evil": "1"}}}, "labels"),
        (
            "remove a label",
            "gpu-1",
            {"metadata": {"labels": {"nvidia.com/gpu.present": None}}},
            "labels",
        ),
        (
            "other annotation",
            "gpu-1",
            annotations({"example.com/owner": "me"}),
            "topo-scheduler.io/",
        ),
        (
            "look-alike prefix",
            "gpu-1",
            annotations({"topo-scheduler.io.evil.com/x": "1"}),
            "topo-scheduler.io/",
        ),
        (
            "remove another annotation",
            "gpu-1",
            annotations({"node.alpha.kubernetes.io/ttl": None}),
            "topo-scheduler.io/",
        ),
        ("unschedulable", "gpu-1", {"spec": {"unschedulable": True}}, "spec"),
        (
            "taint",
            "gpu-1",
            {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
            "spec",
        ),
        ("finalizer", "gpu-1", {"metadata": {"finalizers": ["example.com/keep"]}}, "finalizers"),
        (
            "owner",
            "gpu-1",
            {
                "metadata": {
                    "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}]
                }
            },
            "owners",
        ),
    ],
)
def test_agent_may_change_nothing_else(
    policy_agent: tuple[Policy, str], case: str, target: str, patch: dict[str, Any], message: str
) -> None:
    policy, agent = policy_agent
    verdict = patch_node(policy, agent, target, patch, bound_node="gpu-1")
    assert verdict.matched and not verdict.allowed, case
    assert any(message in m for m in verdict.messages), verdict.messages


def test_even_its_annotations_need_a_token_bound_to_that_node(
    policy_agent: tuple[Policy, str],
) -> None:
    """A token without the node-name extra (a legacy Secret token, or a cluster before 1.30)."""
    policy, agent = policy_agent
    verdict = patch_node(policy, agent, "gpu-1", annotations({ANNOTATION_TOPOLOGY: "{}"}), None)
    assert not verdict.allowed and any("bound to" in m for m in verdict.messages)


def test_agent_may_not_create_delete_or_change_status(policy_agent: tuple[Policy, str]) -> None:
    policy, agent = policy_agent
    own = node("gpu-1")
    status = merge_patch(own, {"status": {"capacity": {"nvidia.com/gpu": "16"}}})
    for req, obj, old in (
        (request(agent, "gpu-1", "UPDATE", "status", "gpu-1"), status, own),
        (request(agent, "gpu-1", "DELETE", "", "gpu-1"), None, own),
        (request(agent, "gpu-1", "CREATE", "", "gpu-1"), own, None),
    ):
        verdict = policy.admit(req, obj, old)
        assert verdict.matched and not verdict.allowed, req["operation"]


def test_other_users_are_not_affected(policy_agent: tuple[Policy, str]) -> None:
    policy, agent = policy_agent
    patch = {"metadata": {"labels": {"team": "ml"}}, "spec": {"unschedulable": True}}
    for user in ("system:node:gpu-1", "kubernetes-admin", agent + "-other"):
        verdict = patch_node(policy, user, "gpu-2", patch, bound_node=None)
        assert verdict.allowed and not verdict.matched, user
    other_resource = request(agent, "p", bound_node="gpu-1")
    other_resource["resource"] = {"group": "", "version": "v1", "resource": "pods"}
    assert not policy.admit(other_resource, {}, {}).matched


def test_policy_names_the_agent_of_a_renamed_release() -> None:
    policy, agent = _policy_and_agent(VALUE_SETS["customised"])
    assert agent == "system:serviceaccount:topo-scheduler:existing-agent"  # from the values
    allowed = patch_node(policy, agent, "n", annotations({ANNOTATION_TOPOLOGY: "{}"}), "n")
    assert allowed.allowed
    default_agent = "system:serviceaccount:topo-scheduler:topo-scheduler-agent"
    other = patch_node(policy, default_agent, "n", {"metadata": {"labels": {"x": "y"}}}, "n")
    assert not other.matched


def test_policy_can_be_turned_off_and_goes_with_the_agent() -> None:
    kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert kinds <= {o["kind"] for o in objects()}
    assert not kinds & {o["kind"] for o in objects({"agent": {"nodePolicy": {"enabled": False}}})}
    assert not kinds & {o["kind"] for o in objects({"agent": {"enabled": False}})}
