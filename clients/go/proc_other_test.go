//go:build !linux

package rota_test

import (
	"os"
	"os/exec"
)

// terminateSignal asks the node to shut down gracefully.
var terminateSignal = os.Interrupt

// setParentDeathSignal does nothing where the OS has no parent-death signal.
func setParentDeathSignal(*exec.Cmd) {}
