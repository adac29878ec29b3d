"""explain's output: the JSON report (the stable contract) and the table for people."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.core.group import GroupOutcome, ordinal
from scheduler.core.preemption import Plan
from scheduler.explain.dryrun import DryRun

__all__ = ["document", "report"]


def document(run: DryRun) -> dict[str, Any]:
    """The JSON report of a dry run: the pod, its node or why none, every node's verdict,
    preemption's plan, notes; a pod group's part for a member of one."""
    if run.pod.pod_group is not None:
        return _group_document(run)
    decision, result = run.decision, run.result
    out: dict[str, Any] = {
        "pod": run.pod.key,
        "node": result.node if result is not None else None,
        # the cycle's FailedScheduling text, with the PostFilter (preemption) suffix
        "message": decision.message
        if decision.message is not None or result is None
        else result.message,
    }
    if result is not None and result.allocation is not None:
        out["gpus"] = list(result.allocation.gpus)
        out["busbw"] = result.allocation.busbw
    if result is not None and result.node is not None:
        claims = (run.nodes.get(result.node) or {}).get("claims")
        if claims:
            out["claims"] = claims
    out["preemption"] = _preemption_part(run.plan)
    out["nodes"] = run.nodes
    if run.notes:
        out["notes"] = run.notes
    return out


def _group_document(run: DryRun) -> dict[str, Any]:
    assert run.pod.pod_group is not None
    assumed = run.decision.assumed
    out: dict[str, Any] = {
        "pod": run.pod.key,
        "node": assumed.node if assumed is not None else None,
        "message": None if assumed is not None else run.decision.message,
    }
    if assumed is not None and assumed.gpus:
        out["gpus"] = list(assumed.gpus)
    out["nodes"] = run.nodes
    out["preemption"] = _preemption_part(run.plan)
    out["group"] = _group_part(run.outcome, run.pod.pod_group.key)
    if run.notes:
        out["notes"] = run.notes
    return out


def _preemption_part(plan: Plan | None) -> dict[str, Any] | None:
    """The preemption plan (a dry run: nothing is evicted), or None."""
    if plan is None:
        return None
    part: dict[str, Any] = {
        "node": plan.node,
        "victims": [victim.pod.key for victim in plan.victims],
        "gpus": list(plan.gpus),
    }
    if plan.members:  # a gang preemptor: where each member goes
        part["members"] = {member.key: node for member, node, _ in plan.members}
    return part


def _group_part(outcome: GroupOutcome | None, key: str) -> dict[str, Any]:
    if outcome is None:
        return {"name": key, "minMember": None, "members": {}, "domain": None, "message": None}
    part: dict[str, Any] = {
        "name": outcome.spec.key,
        "minMember": outcome.spec.min_member,
        "members": {
            member: {"node": node, "gpus": list(gpus)}
            for member, (node, gpus) in outcome.members.items()
        },
        "domain": (
            {"key": outcome.domain[0], "value": outcome.domain[1]} if outcome.domain else None
        ),
        "domainReason": outcome.domain_note,
        "message": outcome.message,
    }
    if outcome.scheduled and not outcome.waiting:  # the modelled all-reduce of the group
        part["busbw"] = _round(outcome.busbw)
        runner = outcome.runner_up
        part["runnerUp"] = (
            {
                "domain": (
                    {"key": runner.domain[0], "value": runner.domain[1]} if runner.domain else None
                ),
                "busbw": _round(runner.busbw),
            }
            if runner is not None
            else None
        )
    if outcome.reservation is not None:  # capacity a reservation would hold for the group
        held = outcome.reservation
        part["reservation"] = {
            "members": {key: node for key, (_, node) in sorted(held.members.items())},
            "gpus": held.gpus,
            "expiresInSeconds": round(held.expires - held.since),
        }
    if not outcome.scheduled and outcome.domains:  # every domain looked at: members that fit
        part["domains"] = [
            {"key": d.key, "value": d.value, "fit": d.fit, "placed": d.placed}
            for d in outcome.domains
        ]
    if not outcome.scheduled and outcome.blocked is not None:
        part["firstUnplaced"] = {
            "pod": outcome.blocked.pod.key,
            "position": outcome.blocked.position,
            "reason": outcome.blocked.why,
        }
    return part


def report(document: Mapping[str, Any], weights: Mapping[str, int]) -> str:
    """The table for people: nodes by total, each plugin's score, reasons, chosen node."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    nodes: Mapping[str, Any] = document["nodes"]
    plugins = list(dict.fromkeys(p for entry in nodes.values() for p in entry["scores"]))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("NODE", no_wrap=True)
    for plugin in plugins:
        table.add_column(f"{plugin} (x{weights.get(plugin, 1)})", justify="right")
    table.add_column("TOTAL", justify="right")
    table.add_column("GPUS / REASONS")
    order = sorted(
        nodes.items(),
        key=lambda kv: (not kv[1]["feasible"], -(kv[1]["total"] or 0), kv[0]),
    )
    for name, entry in order:
        mark = "*" if name == document["node"] else ""
        if entry["feasible"]:
            gpus = entry.get("gpus")
            detail = ""
            if gpus:
                detail = f"gpus {','.join(map(str, gpus))}"
                if entry.get("busbw") is not None:
                    detail += f" busbw {entry['busbw']:g} GB/s"
                if "gpuSetScore" in entry:
                    detail += f" set score {entry['gpuSetScore']}"
                if entry.get("gpuLinks"):
                    detail += f" ({entry['gpuLinks']})"
            for claim, chosen in (entry.get("claims") or {}).items():
                detail += "; " if detail else ""
                detail += f"claim {claim}: " + ",".join(
                    d.rsplit("/", 1)[-1] for d in chosen["devices"]
                )
                if chosen.get("gpus"):
                    detail += f" (gpus {','.join(map(str, chosen['gpus']))}"
                    if chosen.get("busbw") is not None:
                        detail += f" busbw {chosen['busbw']:g} GB/s"
                    detail += ")"
            cells = [str(entry["scores"].get(p, "-")) for p in plugins]
            table.add_row(mark, name, *cells, str(entry["total"]), detail)
        else:
            table.add_row(mark, name, *["-"] * len(plugins), "-", "; ".join(entry["reasons"]))
    out = StringIO()
    console = Console(file=out, width=1000, no_color=True, highlight=False)
    if document["node"] is not None:
        gpus = document.get("gpus")
        suffix = f" with GPUs {','.join(map(str, gpus))}" if gpus else ""
        console.print(f"pod {document['pod']} -> node {document['node']}{suffix}")
    else:
        console.print(f"pod {document['pod']} is unschedulable: {document['message']}")
    console.print(table)
    plan = document.get("preemption")
    if plan is not None:
        victims = plan["victims"]
        gpus = f" (GPUs {','.join(map(str, plan['gpus']))})" if plan.get("gpus") else ""
        console.print(
            f"preemption: would run on {plan['node']}{gpus} after evicting "
            f"{len(victims)} pod(s): {', '.join(victims)} (dry run: nothing evicted)"
        )
        for member, node in (plan.get("members") or {}).items():
            console.print(f"preemption: pod group member {member} -> {node}")
    for note in document.get("notes", []):
        console.print(f"note: {note}")
    group = document.get("group")
    if group is not None:
        console.print(_group_table(group), end="")
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def _round(busbw: float | None) -> float | None:
    return None if busbw is None else round(busbw, 2)


def _gbps(busbw: float | None) -> str:
    return "none (nothing to reduce)" if busbw is None else f"{busbw:.1f} GB/s"


def _group_table(group: Mapping[str, Any]) -> str:
    """The group's placement for people: one line per member."""
    lines = [f"pod group {group['name']} (minMember {group['minMember']}):"]
    domain = group.get("domain")
    if group.get("message"):
        lines[0] += f" not placed: {group['message']}"
    elif domain is not None:
        lines[0] += f" placed in {domain['key']}={domain['value']}"
    else:
        lines[0] += " placed"
    if group.get("domainReason"):
        lines.append(f"  domain: {group['domainReason']}")
    if "busbw" in group:
        line = f"  modelled all-reduce bus bandwidth: {_gbps(group['busbw'])}"
        runner = group.get("runnerUp")
        if runner is not None:
            where = runner["domain"]
            place = f"{where['key']}={where['value']}" if where else "across the cluster"
            line += f"; runner-up {place}: {_gbps(runner['busbw'])}"
        else:
            line += "; no other placement tried"
        lines.append(line)
    held = (group.get("reservation") or {}).get("members", {})
    for member, where in group["members"].items():
        node = where["node"] or "-"
        gpus = ",".join(map(str, where["gpus"]))
        line = f"  {member} -> {node}" + (f" gpus {gpus}" if gpus else "")
        lines.append(line + (f" (held on {held[member]})" if member in held else ""))
    for domain in group.get("domains") or []:
        line = f"  {domain['key']}={domain['value']}: {domain['fit']} pods of the group fit"
        if domain["placed"] is not None:
            line += f", {domain['placed']} placed when tried"
        lines.append(line)
    first = group.get("firstUnplaced")
    if first is not None:
        lines.append(
            f"  first pod that does not fit: {first['pod']} ({ordinal(first['position'])}), "
            "the node verdicts above are for it"
        )
    return "\n".join(lines) + "\n"
