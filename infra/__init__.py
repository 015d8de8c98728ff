"""Infrastructure both components share: the Kubernetes port and its official-client adapter,
configuration (file, environment, flags), logs and metrics."""
