"""Which chips a container gets: the kubelet's request checks and answers, the kubelet's own
choice (no Kubernetes API), and the annotation handshake (rules, and the shell that talks to
the API server)."""
