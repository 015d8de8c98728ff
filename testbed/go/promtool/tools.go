//go:build tools

// Package tools pins the promtool command the tests run.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
