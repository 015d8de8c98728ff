"""The state the verbs decide from and the controllers act on: the cluster as the watches
read it (``informers`` → ``live_view`` → ``cluster_view``'s node views) and what the service
itself has decided and the cluster does not show yet (assumed binds, gang reservations, fault
jobs' holds, vNPUs given), kept together under one lock (``extender_state.ExtenderState``)
because a decision must see both at once. It serves no caller and acts on nothing itself."""
