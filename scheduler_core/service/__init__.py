"""The extender service: kube-scheduler's and Volcano's verbs over HTTP, fed by a read of the
cluster; it turns the API server's objects into the engine's values. Split by what each part
is to its caller: ``state`` (what the watches read and the service decided, under one lock),
``verbs`` (a request in, a decision out), ``controllers`` (what acts on the cluster on its
own), ``views`` (metrics, the NPU map, status); ``wire`` is the verbs' typed requests, which
the state's gangs speak too. Around them: ``routes`` (a request's path and body to a verb or a
view and back), ``access`` (which credential may call which route), ``election`` (the Lease
and the leader's label), and ``server``, which wires them and runs the lifecycle."""
