package kube

import (
	"context"
	"errors"
	"net/url"

	"github.com/gorilla/websocket"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"
)

// Console kinds: the VMI subresources virt-api serves as websockets.
const (
	ConsoleVNC    = "vnc"
	ConsoleSerial = "console"
)

// ConsoleDialer opens the websocket of a VMI console subresource (kind is
// ConsoleVNC or ConsoleSerial) without a rest.Config: simulated clusters
// dial their in-process virt-api stand-in with it. The connection must
// speak virt-api's plain.kubevirt.io protocol (raw bytes in binary frames).
type ConsoleDialer func(ctx context.Context, ns, name, kind string) (*websocket.Conn, error)

// SetConsoleDialer sets how a cluster without a RESTConfig opens consoles;
// nil removes it.
func (c *Cluster) SetConsoleDialer(d ConsoleDialer) {
	if d == nil {
		c.dialer.Store(nil)
		return
	}
	c.dialer.Store(&d)
}

// ErrNoConsole is returned when the cluster has no way to open consoles.
var ErrNoConsole = errors.New("console access needs a cluster connection (no rest config and no console dialer)")

// OpenConsole connects to the VNC or serial console of g's instance
// through virt-api. The returned stream's Stream copies both ways until one
// side ends, then releases the connection. With a RESTConfig it uses
// KubeVirt's AsyncSubresourceHelper (as virtctl does); otherwise the
// cluster's ConsoleDialer.
func (c *Cluster) OpenConsole(ctx context.Context, g Guest, kind string) (kvcorev1.StreamInterface, error) {
	if kind != ConsoleVNC && kind != ConsoleSerial {
		return nil, errors.New("unknown console kind " + kind)
	}
	if cfg := c.restConfig(ctx); cfg != nil {
		q := url.Values{}
		if kind == ConsoleVNC {
			// PVE semantics: a new console session takes over the display.
			q.Set("preserveSession", "false")
		}
		return kvcorev1.AsyncSubresourceHelper(cfg, "virtualmachineinstances", g.Namespace(), g.Name(), kind, q)
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
	return kvcorev1.NewWebsocketStreamer(conn, done), nil
}
