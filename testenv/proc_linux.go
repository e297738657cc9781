package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// setDeathSignal makes the kernel SIGKILL the child when the test binary
// dies without running its cleanups (go test -timeout panic, os.Exit,
// SIGKILL), so no etcd or kube-apiserver outlives the tests.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// reapStale removes directories left by earlier test processes that died
// without cleaning up, killing any etcd/kube-apiserver/virt-api still running from
// them. A process is only killed if its command line mentions that
// directory, so a recycled pid is never hit.
func reapStale(root, prefix string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		owner, err := readPid(filepath.Join(dir, "owner.pid"))
		if err != nil || alive(owner) {
			continue
		}
		for _, name := range []string{"kube-apiserver", "etcd", "virt-api"} {
			pid, err := readPid(filepath.Join(dir, name+".pid"))
			if err != nil || !alive(pid) {
				continue
			}
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err == nil && strings.Contains(string(cmdline), dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.RemoveAll(dir)
	}
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
