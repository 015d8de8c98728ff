"""The scheduling core: which node and which chips each NPU pod gets, on every Ascend product.

``engine``: the pure decision engine (products, validation, policies, the session ledger,
switch and SuperPoD affinity, fault decisions). ``service``: the kube-scheduler and Volcano
extender around it (HTTP, the cluster view, assumed binds, gangs, fault restarts).
"""
