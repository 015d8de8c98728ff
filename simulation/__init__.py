"""The simulation harness, for tests, benchmarks and the demo; not shipped in the wheel or the
image: an in-memory API store and a loopback API server over HTTP, a kubelet simulator, a
whole simulated cluster built with the agent's own wiring, a stand-in kube-scheduler."""
