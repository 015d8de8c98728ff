"""The controllers: what acts on the cluster on its own, no caller waiting (for now the pod
deletions every one of them makes, marked first)."""
