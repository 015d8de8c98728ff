//go:build tools

// Package tools pins etcd's server command, which the tests run under kube-apiserver.
package tools

import _ "go.etcd.io/etcd/server/v3"
