"""GPU node agent: NVML discovery, kubelet pod-resources, node annotations (adapter)."""
