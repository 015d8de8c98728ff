"""The extender service: kube-scheduler's and Volcano's verbs over HTTP, fed by a read of the
cluster; it turns the API server's objects into the engine's values."""
