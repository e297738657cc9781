package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/gorilla/websocket"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"
)

// Console kinds: the VMI subresources virt-api serves as websockets.
const (
	ConsoleVNC    = "vnc"
	ConsoleSerial = "console"
)

// consoleDialer opens the websocket of a VMI console subresource (kind is
// ConsoleVNC or ConsoleSerial) without a rest.Config: simulated clusters
// dial their in-process virt-api stand-in with it. The connection must
// speak virt-api's plain.kubevirt.io protocol (raw bytes in binary frames).
type consoleDialer func(ctx context.Context, ns, name, kind string) (*websocket.Conn, error)

// setConsoleDialer sets how a cluster without a rest config opens consoles;
// nil removes it.
func (c *Cluster) setConsoleDialer(d consoleDialer) {
	if d == nil {
		c.dialer.Store(nil)
		return
	}
	c.dialer.Store(&d)
}

// ErrNoConsole is returned when the cluster has no way to open consoles.
var ErrNoConsole = errors.New("console access needs a cluster connection (no rest config and no console dialer)")

// ErrConsoleNotServed wraps virt-api's 404 on a console subresource.
// KubeVirt's client words every 404 as "Virtual Machine not found", but
// consoles are opened for an instance that was there a moment ago: more
// likely virt-api (subresources.kubevirt.io) is missing.
var ErrConsoleNotServed = errors.New("virt-api answered 404 on the console subresource")

// Console is an open connection to a VMI's VNC or serial console.
type Console struct {
	stream kvcorev1.StreamInterface
}

// Stream copies in to the console and the console to out until either
// side ends, then releases the connection.
func (c *Console) Stream(in io.Reader, out io.Writer) error {
	return c.stream.Stream(kvcorev1.StreamOptions{In: in, Out: out})
}

// Close releases a connection that will not be streamed.
func (c *Console) Close() error {
	return c.Stream(strings.NewReader(""), io.Discard)
}

// OpenConsole connects to the VNC or serial console of g's instance
// through virt-api, as the caller. With a rest config it uses KubeVirt's
// AsyncSubresourceHelper (as virtctl does); otherwise the cluster's
// consoleDialer. Call Stream or Close on the result.
func (c *Cluster) OpenConsole(ctx context.Context, g Guest, kind string) (*Console, error) {
	if kind != ConsoleVNC && kind != ConsoleSerial {
		return nil, errors.New("unknown console kind " + kind)
	}
	if cfg := c.as(ctx).cfg; cfg != nil {
		q := url.Values{}
		if kind == ConsoleVNC {
			// PVE semantics: a new console session takes over the display.
			q.Set("preserveSession", "false")
		}
		s, err := kvcorev1.AsyncSubresourceHelper(cfg, "virtualmachineinstances", g.Namespace(), g.Name(), kind, q)
		var ae *kvcorev1.AsyncSubresourceError
		if errors.As(err, &ae) && ae.GetStatusCode() == 404 {
			return nil, fmt.Errorf("%w: %w", ErrConsoleNotServed, err)
		}
		if err != nil {
			return nil, err
		}
		return &Console{stream: s}, nil
	}
	d := c.dialer.Load()
	if d == nil {
		return nil, ErrNoConsole
	}
	conn, err := (*d)(ctx, g.Namespace(), g.Name(), kind)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		<-done
		_ = conn.Close()
	}()
	return &Console{stream: kvcorev1.NewWebsocketStreamer(conn, done)}, nil
}
