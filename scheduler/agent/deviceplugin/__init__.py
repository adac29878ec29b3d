"""`topo-scheduler device-plugin`: a kubelet device plugin (v1beta1) that hands each pod the
GPU set topo-scheduler recorded on it, and reports GPU health from NVML.

Modules: `admission` (which pod is admitted, which set to prefer; pure), `health` (devices
and NVML health), `plugin` (the decisions), `kube` (pod watch, events, node annotation),
`server` (gRPC service, kubelet registration), `metrics`, `cli`; `v1beta1/` holds the
kubelet's API and its generated modules. Only the `device-plugin` command imports this
package, so `explain` and `simulate` never load gRPC or NVML.
"""
