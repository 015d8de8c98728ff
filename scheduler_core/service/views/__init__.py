"""The views: what the service shows of itself to those who watch it (Prometheus metrics, the
live NPU map, the status text). A view reads the state and decides nothing; each owns what
it keeps to answer fast (the counters, the map's per-node cache). Apart from the verbs, whose
callers wait on them, and from the controllers, which change the cluster."""
