//go:build linux

package rota_test

import (
	"os/exec"
	"syscall"
)

// terminateSignal asks the node to shut down gracefully.
var terminateSignal = syscall.SIGTERM

// setParentDeathSignal kills the node if the test binary dies without stopping it (a
// panic, a kill), so that no node outlives its tests.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
