"""The per-node agent (kubelet device plugin for Ascend NPUs); built by later issues."""
