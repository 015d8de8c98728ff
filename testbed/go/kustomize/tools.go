//go:build tools

// Package tools pins the kustomize command the tests run.
package tools

import _ "sigs.k8s.io/kustomize/kustomize/v5"
