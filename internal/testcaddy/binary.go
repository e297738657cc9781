package testcaddy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvBinary names the environment variable that points at the Caddy binary
// built by xcaddy.sh (test.sh sets it to the repository's ./caddy).
const EnvBinary = "CADDY_PROXMOX_CADDY"

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// Binary returns the path of ./caddy as the README builds it (xcaddy.sh),
// so that process tests run exactly what users run: the one test.sh built
// (CADDY_PROXMOX_CADDY), or else one built now from the working tree.
func Binary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() { binaryPath, binaryErr = findBinary() })
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

func findBinary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	bin := filepath.Join(root, "caddy")
	if os.Getenv("CI") != "" {
		return "", fmt.Errorf("%s unset: test.sh builds ./caddy with ./xcaddy.sh and sets it", EnvBinary)
	}
	// Outside test.sh the binary may predate the working tree: rebuild it
	// (a warm xcaddy build takes ~25 s).
	cmd := exec.Command(filepath.Join(root, "xcaddy.sh"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building ./caddy with xcaddy.sh: %w\n%s", err, out)
	}
	return bin, nil
}

// Process is a ./caddy child process running one Caddyfile.
type Process struct {
	t       testing.TB
	bin     string
	file    string
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
	out     *lockedBuffer
	stopped bool
}

// StartProcess writes caddyfile to a temp dir and runs `caddy run` on it
// until the test ends. The Caddyfile should start with Globals(dir) (admin
// off, storage under dir) so that processes never share state by accident.
func StartProcess(t testing.TB, dir, caddyfile string) *Process {
	t.Helper()
	file := filepath.Join(dir, fmt.Sprintf("Caddyfile.%d", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte(caddyfile), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &Process{t: t, bin: Binary(t), file: file, dir: dir, out: &lockedBuffer{}}
	p.start()
	t.Cleanup(p.Stop)
	return p
}

func (p *Process) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin, "run", "--config", p.file, "--adapter", "caddyfile")
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "HOME="+p.dir, "XDG_DATA_HOME="+p.dir, "XDG_CONFIG_HOME="+p.dir)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("starting %s: %v", p.bin, err)
	}
	p.cmd, p.done, p.stopped = cmd, make(chan struct{}), false
	go func() { _ = cmd.Wait(); close(p.done) }()
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 s).
func (p *Process) Stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Restart stops and starts the process on the same Caddyfile.
func (p *Process) Restart() {
	p.t.Helper()
	p.Stop()
	p.start()
}

// Exited tells whether the process has ended on its own.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return !p.stopped
	default:
		return false
	}
}

// WaitReady polls url until it answers anything, as testcaddy.WaitReady
// does, and fails the test with the process's log when the process ends
// first (e.g. on a port it could not bind) instead of leaving the test to
// fail later without it.
func (p *Process) WaitReady(url string) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := Ready(url, 0)
		if err == nil && !p.Exited() {
			return
		}
		if p.Exited() || time.Now().After(deadline) {
			p.t.Fatalf("./caddy not serving %s (exited: %v, last error: %v); log:\n%s", url, p.Exited(), err, p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Output is what the process printed so far (its log).
func (p *Process) Output() string { return p.out.String() }

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
