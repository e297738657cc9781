//go:build !linux

package testenv

import (
	"os"
	"os/exec"
	"syscall"
)

// Only Linux has a parent-death signal; elsewhere Stop and the signal
// handler are the only guards.
func setDeathSignal(cmd *exec.Cmd) {}

func reapStale(root, prefix string) {}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}
