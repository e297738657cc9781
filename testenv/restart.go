package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// StopAPIServer kills kube-apiserver (SIGTERM, a short grace, SIGKILL) and
// waits until it is reaped, for outage tests. etcd, the front proxies and
// their URLs stay: clients see connections refused (direct) or 502s
// (through a proxy) until StartAPIServer.
func (e *Env) StopAPIServer() {
	e.procMu.Lock()
	p := e.apiserver
	e.procMu.Unlock()
	p.stop(300 * time.Millisecond)
	e.logger().Info("testenv: kube-apiserver stopped")
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the
// same flags: the same port, etcd, certificates and token file, so every
// config and kubeconfig of the Env stays valid. It returns once /readyz
// answers ok. Starting one that runs is an error.
func (e *Env) StartAPIServer(ctx context.Context) error {
	return e.restart(ctx, "kube-apiserver", &e.apiserver, e.apiArgs, func(ctx context.Context) error { return e.waitReady(ctx) })
}

// RestartAPIServer is StopAPIServer then StartAPIServer.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	e.StopAPIServer()
	return e.StartAPIServer(ctx)
}

// StopEtcd kills etcd and waits until it is reaped. kube-apiserver keeps
// running and answers errors (and /readyz fails) until StartEtcd.
func (e *Env) StopEtcd() {
	e.procMu.Lock()
	p := e.etcd
	e.procMu.Unlock()
	p.stop(2 * time.Second)
	e.logger().Info("testenv: etcd stopped")
}

// StartEtcd starts etcd again on its data directory and port and returns
// once kube-apiserver is ready on it again.
func (e *Env) StartEtcd(ctx context.Context) error {
	return e.restart(ctx, "etcd", &e.etcd, e.etcdArgs, func(ctx context.Context) error { return e.waitReady(ctx) })
}

// APIServerRunning tells whether kube-apiserver runs (false between
// StopAPIServer and StartAPIServer).
func (e *Env) APIServerRunning() bool {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	return e.apiserver != nil && !e.apiserver.exited()
}

func (e *Env) restart(ctx context.Context, name string, slot **process, args []string, ready func(context.Context) error) error {
	if len(args) == 0 {
		return errors.New("testenv: " + name + " was never started")
	}
	e.procMu.Lock()
	old := *slot
	if old != nil && !old.exited() {
		e.procMu.Unlock()
		return fmt.Errorf("testenv: %s is running", name)
	}
	if e.stopped {
		e.procMu.Unlock()
		return errors.New("testenv: the Env is stopped")
	}
	// Keep the earlier run's log next to the new one.
	log := filepath.Join(e.Dir, name+".log")
	_ = os.Rename(log, filepath.Join(e.Dir, fmt.Sprintf("%s.%d.log", name, time.Now().UnixNano())))
	p, err := startProcess(name, filepath.Join(e.BinDir, name), args, e.Dir, nil)
	if err != nil {
		e.procMu.Unlock()
		return err
	}
	*slot = p
	e.procMu.Unlock()
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := ready(ctx); err != nil {
		return fmt.Errorf("testenv: restarting %s: %w", name, err)
	}
	e.logger().Info("testenv: restarted", zap.String("process", name), zap.Duration("ready_after", time.Since(t0)))
	return nil
}
