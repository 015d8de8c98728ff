//go:build tools

// Package tools pins the Kubernetes control-plane commands the tests run; the build script
// builds them with `go build` from this module (testbed/build.sh).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
