"""The decision engine, pure: typed values (nodes, jobs) in, decisions out. No Kubernetes, no
gRPC, no I/O, no clock: the service and the CLI around it are the only parts that touch the
outside.

Its surface, by module: ``model`` (NodeState, Job, Task, Placement, Decision, Status),
``products`` (the handlers as data, chip selection), ``handlers`` (which handler a job
and a node get), ``validation`` (validate_job),
``policies`` (huawei, binpack), ``session`` (Session: filter, score, place), ``ledger``,
``tor`` / ``tor_share`` / ``superpod`` / ``locality`` (network placement of gangs),
``rescheduling`` (fault jobs), ``replay`` (trace replay), ``diagram`` (rings as text).
Nothing is imported here: the node agent uses ``products`` alone and should not pay for
the rest.
"""
