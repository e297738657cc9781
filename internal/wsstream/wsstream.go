// Package wsstream adapts a websocket to a byte stream: VNC and serial
// consoles are streams, while websockets carry messages.
package wsstream

import (
	"io"

	"github.com/gorilla/websocket"
)

// Conn reads a websocket as one stream (messages concatenated) and sends
// each Write as one binary message.
type Conn struct {
	c *websocket.Conn
	r io.Reader
}

// New wraps c.
func New(c *websocket.Conn) *Conn { return &Conn{c: c} }

// Read reads across message boundaries.
func (b *Conn) Read(p []byte) (int, error) {
	for {
		if b.r == nil {
			_, r, err := b.c.NextReader()
			if err != nil {
				return 0, err
			}
			b.r = r
		}
		n, err := b.r.Read(p)
		if err == io.EOF {
			b.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

// Write sends p as one binary message.
func (b *Conn) Write(p []byte) (int, error) {
	if err := b.c.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
