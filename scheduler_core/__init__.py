"""The scheduling core: HCCS-affine placement of NPU jobs on Ascend 910 / 910B servers.

``engine``: the pure decision engine (products, validation, policies, the session ledger,
switch and SuperPoD affinity, fault decisions). ``service``: the kube-scheduler and Volcano
extender around it (HTTP, the cluster view, assumed binds, gangs, fault restarts).
"""
