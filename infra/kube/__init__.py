"""Kubernetes access for the agent and the scheduler service: the port and its adapters.

Not part of the pure engine: the engine never imports this package.
"""
