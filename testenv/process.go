package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one child (etcd, kube-apiserver or virt-api). Its output goes to a log
// file in the environment's directory; a goroutine reaps it as soon as it
// exits so that done tells whether it is still alive.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{}
	err     error // valid after done is closed
}

// startProcess starts bin with args in dir, its output in dir/name.log (and
// tee), with the environment of the tests plus env.
func startProcess(name, bin string, args []string, dir string, tee io.Writer, env ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out io.Writer = f
	if tee != nil {
		out = io.MultiWriter(f, tee)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = os.Environ()
	if os.Getenv("GOMAXPROCS") == "" {
		// Keep parallel test packages from fighting over many cores.
		cmd.Env = append(cmd.Env, "GOMAXPROCS=2")
	}
	cmd.Env = append(cmd.Env, env...)
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("testenv: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	// Record the pid so that a later run can clean up after a crashed one.
	_ = os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs and waits for the
// process to be reaped. The data of these processes is throw-away, so a
// short grace is enough (kube-apiserver alone would take >10 s to drain).
func (p *process) stop(grace time.Duration) {
	if p == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		// Not reaped: only possible if the kernel is stuck (D state).
	}
}

// tail returns the last n lines of the process log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

func (p *process) exitError() error {
	return fmt.Errorf("testenv: %s exited during start-up (%v); last log lines:\n%s", p.name, p.err, p.tail(40))
}

// waitFor polls check every interval until it returns true, the context
// ends, or one of procs exits.
func waitFor(ctx context.Context, interval time.Duration, what string, procs []*process, check func(context.Context) (bool, error)) error {
	var last error
	for {
		for _, p := range procs {
			if p.exited() {
				return p.exitError()
			}
		}
		ok, err := check(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("testenv: timed out waiting for %s", what)
			if last != nil {
				msg += fmt.Sprintf(" (last error: %v)", last)
			}
			for _, p := range procs {
				msg += fmt.Sprintf("\n--- last lines of %s log:\n%s", p.name, p.tail(20))
			}
			return errors.New(msg)
		case <-time.After(interval):
		}
	}
}

// addrInUse reports whether a process failed because its port was taken
// between picking it and binding it.
func (p *process) addrInUse() bool {
	return strings.Contains(p.tail(60), "address already in use")
}
