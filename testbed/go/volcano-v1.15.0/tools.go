//go:build tools

// Package tools pins Volcano's commands (testbed/volcano_build.py builds them).
package tools

import (
	_ "volcano.sh/volcano/cmd/controller-manager"
	_ "volcano.sh/volcano/cmd/scheduler"
)
