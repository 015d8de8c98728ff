"""kubelet device-plugin gRPC contracts and a kubelet simulator; built by later issues."""
