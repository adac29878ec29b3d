"""End to end: the agent publishes a fake node's topology, topo-scheduler binds pods with a
recorded GPU set, the fake kubelet admits them through the device plugin, and every pod gets
exactly its recorded set, over rounds of pods finishing and new ones arriving."""

from __future__ import annotations

import asyncio
import random

from conftest import NODE, Node, core_api
from prometheus_client import generate_latest

from scheduler.agent.fakegpus import FakeNvml, parse_fake_gpus
from scheduler.agent.kube import KubeNodeApi
from scheduler.agent.loop import Agent, AgentConfig
from scheduler.core.topology import ANNOTATION_GPUS, parse_gpu_indices
from tests.emulator import PODS
from tests.emulator.harness import Replica, all_bound_once, fast_settings, wait_for


def test_every_scheduled_pod_gets_its_recorded_set(node: Node) -> None:
    node.fake_gpus = "dgx1-v100"
    nvml = FakeNvml(parse_fake_gpus(node.fake_gpus), NODE)
    agent = Agent(
        AgentConfig(node_name=NODE, pod_resources_socket=""),
        nvml,
        KubeNodeApi(core_api(node.emu.url)),
        read_file=nvml.read_file,
    )
    assert agent.sync_once().patched  # the topology, with the fake GPUs' UUIDs
    running = node.start_plugin(FakeNvml(parse_fake_gpus(node.fake_gpus), NODE))
    node.kubelet.wait_registered(1)
    by_uuid = running.plugin.inventory.by_uuid
    rng = random.Random(3)
    checked: list[str] = []

    async def scenario() -> None:
        replica = Replica(fast_settings(node.emu)).start()
        live: list[str] = []
        for wave in range(10):
            names = []
            free = 8 - sum(
                len(
                    parse_gpu_indices(
                        node.emu.pod(f"ml/{n}")["metadata"]["annotations"][ANNOTATION_GPUS]
                    )
                )
                for n in live
            )
            while free > 0:
                size = min(free, rng.choice((1, 2, 2, 4)))
                name = f"w{wave}-{len(names)}"
                node.emu.create_pod(name, gpus=size, namespace="ml")
                names.append(name)
                free -= size
            keys = [f"ml/{n}" for n in names]
            await wait_for(lambda k=keys: all_bound_once(node.emu, k), what=f"wave {wave} bound")
            await asyncio.to_thread(node.kubelet.admit_pending)
            for name in names:
                pod = node.emu.pod(f"ml/{name}")
                recorded = parse_gpu_indices(pod["metadata"]["annotations"][ANNOTATION_GPUS])
                got = tuple(
                    sorted(by_uuid[d] for d in node.kubelet.allocated[("ml", name)]["main"])
                )
                assert got == recorded, f"{name}: kubelet gave {got}, scheduler recorded {recorded}"
                checked.append(name)
            live += names
            for name in rng.sample(live, len(live) // 2):  # half of the jobs finish
                live.remove(name)
                node.kubelet.release("ml", name)
                node.emu.delete(PODS, name, "ml")
            await asyncio.sleep(0.3)  # the scheduler's watch sees the deletions
        assert await replica.shutdown() == 0

    asyncio.run(scenario())
    assert len(checked) >= 16
    held = [d for pod in node.kubelet.allocated.values() for ids in pod.values() for d in ids]
    assert len(held) == len(set(held))
    metrics = generate_latest(running.metrics.registry).decode()
    assert "topo_scheduler_gpu_set_mismatches_total 0.0" in metrics
    # Each answer came from the pod's record, not from a coincidence with our own pick.
    recorded = (
        f'topo_scheduler_device_plugin_allocations_total{{source="recorded"}} {len(checked)}.0'
    )
    assert recorded in metrics
