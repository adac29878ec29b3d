"""The pure core: quantities, the pod and node model, the column snapshot and its cache, the
queue, the framework and its one scheduling cycle, the configuration and GPU topology.

Nothing here does I/O, talks to Kubernetes, NVML or gRPC; adapters (`scheduler.kube`,
`scheduler.sim`, `scheduler.agent`, `scheduler.explain`, `scheduler.cli`) import the core, never
the other way round."""
