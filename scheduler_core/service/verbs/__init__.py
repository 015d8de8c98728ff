"""The verbs: a caller's request in, a decision out, while the caller waits (kube-scheduler's
filter, prioritize, preempt and bind; Volcano's through ``volcano``). They decide from the
state (``service.state``, which the ``Extender`` makes) under its lock, and keep of their own
only what one call leaves for a later one: the filter's passes the bind checks, the
preemptions' nominations. Nothing here runs on its own: the controllers do."""
