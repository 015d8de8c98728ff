"""The wire contract between the scheduler and the node agent, and with Huawei's own
components: resource and chip names, pod annotations and labels, what is read off pods and
nodes, the DeviceInfo ConfigMap codec, the rank table, Go's JSON. Imports nothing of ours.
"""
