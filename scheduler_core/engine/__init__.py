"""The decision engine, pure: typed values (nodes, jobs) in, decisions out. No Kubernetes, no
gRPC, no I/O, no clock: the service and the CLI around it are the only parts that touch the
outside.

Its surface, by module: ``model`` (NodeState, Job, Task, Placement, Decision, Status),
``validation`` (validate_job), ``policies`` (huawei, binpack), ``session`` (Session: filter,
score, place), ``ledger``, ``tor`` / ``tor_share`` / ``superpod`` / ``racks`` / ``locality``
(network placement of gangs), ``rescheduling`` (fault jobs), ``vnpu`` (dynamic vNPU). The
products (a folder per family: its handlers as data, their validation, fit, refusal words,
score and chip choice behind ``Rules``) and the registry (which products exist, which handler
a job and a node get) are ``chip_topology``'s, shared with the node daemons: the engine calls
a product's ``rules`` and never branches on its family. Nothing is imported here.
"""
