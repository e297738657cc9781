package wakel4

import (
	"bytes"
	"errors"
	"net"
	"os"
	"time"

	"github.com/mholt/caddy-l4/layer4"
	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// maxDatagram is the largest datagram caddy-l4 receives (its UDP read
// buffers are 9000 bytes, for jumbo frames).
const maxDatagram = 9000

// errFlowEnded: the UDP flow closed (caddy-l4's idle_timeout passed
// without a datagram) before the guest was ready.
var errFlowEnded = errors.New("UDP flow ended")

// datagram is one read of a flow: a datagram or the error that ended the
// reads.
type datagram struct {
	b   []byte
	err error
}

// holdFlow waits for the wake of a UDP flow. Unlike a stream, a flow
// must be read while it waits: caddy-l4 hands each flow its datagrams
// through a small channel, and a flow that is not read stalls every flow
// of its listener. The datagrams that come meanwhile are kept, up to
// max_datagrams, and returned in order; the others are dropped.
func (h *Handler) holdFlow(cx *layer4.Connection, op *lxc.WakeOp, log *zap.Logger) ([][]byte, error) {
	reads := make(chan datagram)
	go readFlow(cx, reads)
	var (
		queue   [][]byte
		dropped int
	)
	keep := func(d datagram) {
		if d.b == nil {
			return
		}
		if len(queue) < h.MaxDatagrams {
			queue = append(queue, d.b)
			return
		}
		if dropped == 0 {
			log.Warn("dropping datagrams while the guest starts: max_datagrams reached", zap.Int("max_datagrams", h.MaxDatagrams))
		}
		dropped++
	}
	timer := time.NewTimer(h.hold)
	defer timer.Stop()
	var err error
wait:
	for {
		select {
		case d := <-reads:
			keep(d)
			if d.err != nil {
				// The reader has stopped: the flow is gone.
				return nil, errFlowEnded
			}
		case <-op.Done():
			err = op.Err()
			break wait
		case <-timer.C:
			err = errHoldTimeout
			break wait
		}
	}
	// Stop the reader without losing a datagram: a read deadline in the
	// past ends its pending read, after which nothing more is read here.
	_ = cx.SetReadDeadline(time.Now().Add(-time.Second))
	for d := range reads {
		keep(d)
		if d.err != nil {
			if !errors.Is(d.err, os.ErrDeadlineExceeded) && err == nil {
				err = errFlowEnded
			}
			break
		}
	}
	_ = cx.SetReadDeadline(time.Time{})
	if dropped > 0 {
		log.Info("datagrams dropped while the guest started", zap.Int("dropped", dropped), zap.Int("delivered", len(queue)))
	}
	return queue, err
}

// readFlow sends every datagram of the flow, then the error that ends
// its reads (a deadline, the flow's end), and returns.
func readFlow(cx *layer4.Connection, reads chan<- datagram) {
	buf := make([]byte, maxDatagram)
	for {
		n, err := cx.Read(buf)
		d := datagram{err: err}
		if n > 0 {
			d.b = bytes.Clone(buf[:n])
		}
		reads <- d
		if err != nil {
			return
		}
	}
}

// replayConn delivers the datagrams held during a wake, one per read,
// before reading the flow again.
type replayConn struct {
	net.Conn
	queue [][]byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.queue) > 0 {
		n := copy(p, c.queue[0])
		c.queue = c.queue[1:]
		return n, nil
	}
	return c.Conn.Read(p)
}
