package kubevirtsim

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

// The simulated VNC server draws its screen in the pixel format the client
// asks for with SetPixelFormat, as QEMU does: noVNC asks for red at shift 0
// and blue at 16, the opposite of what ServerInit announces.
func TestRFBPixelFormats(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []byte // PIXEL_FORMAT sent with SetPixelFormat; nil: keep ServerInit's
	}{
		{"server's own", nil},
		{"noVNC (32 bpp, RGB at 0/8/16)", []byte{32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0}},
		{"32 bpp big endian", []byte{32, 24, 1, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}},
		{"16 bpp RGB565", []byte{16, 16, 0, 1, 0, 31, 0, 63, 0, 31, 11, 5, 0, 0, 0, 0}},
		{"8 bpp BGR233", []byte{8, 8, 0, 1, 0, 7, 0, 7, 0, 3, 0, 3, 6, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() { _ = serveRFB(bufio.NewReader(server), server); server.Close() }()
			_ = client.SetDeadline(time.Now().Add(10 * time.Second))
			read := func(n int) []byte {
				t.Helper()
				b := make([]byte, n)
				if _, err := io.ReadFull(client, b); err != nil {
					t.Fatalf("reading %d bytes: %v", n, err)
				}
				return b
			}
			write := func(b []byte) {
				t.Helper()
				if _, err := client.Write(b); err != nil {
					t.Fatal(err)
				}
			}
			read(12)
			write([]byte("RFB 003.008\n"))
			read(2) // one security type: None
			write([]byte{1})
			read(4)
			write([]byte{1})
			init := read(24)
			read(int(binary.BigEndian.Uint32(init[20:])))
			format, ok := parsePixelFormat(init[4:20])
			if !ok {
				t.Fatalf("ServerInit pixel format %v", init[4:20])
			}
			if tc.set != nil {
				write(append([]byte{0, 0, 0, 0}, tc.set...))
				format, _ = parsePixelFormat(tc.set)
			}
			write([]byte{3, 0, 0, 0, 0, 0, 0, SimFramebufferWidth, 0, SimFramebufferHeight})
			read(4 + 12) // FramebufferUpdate header and the rectangle's
			px := read(SimFramebufferWidth * SimFramebufferHeight * format.bytesPerPixel)
			for _, at := range [][2]int{{0, 0}, {20, 5}, {40, 10}, {63, 23}, {10, 24}, {63, 47}} {
				x, y := at[0], at[1]
				off := (y*SimFramebufferWidth + x) * format.bytesPerPixel
				r, g, b := decodePixel(format, px[off:off+format.bytesPerPixel])
				wr, wg, wb := SimScreenPixel(x, y)
				if !close8(r, wr, format.redMax) || !close8(g, wg, format.greenMax) || !close8(b, wb, format.blueMax) {
					t.Errorf("pixel (%d,%d) decodes to rgb(%d,%d,%d), want rgb(%d,%d,%d)", x, y, r, g, b, wr, wg, wb)
				}
			}
		})
	}
}

// decodePixel reads one pixel as a client with format f does.
func decodePixel(f pixelFormat, p []byte) (r, g, b uint8) {
	var v uint32
	switch len(p) {
	case 1:
		v = uint32(p[0])
	case 2:
		if f.bigEndian {
			v = uint32(binary.BigEndian.Uint16(p))
		} else {
			v = uint32(binary.LittleEndian.Uint16(p))
		}
	default:
		if f.bigEndian {
			v = binary.BigEndian.Uint32(p)
		} else {
			v = binary.LittleEndian.Uint32(p)
		}
	}
	ch := func(shift uint8, max uint32) uint8 { return uint8((v >> shift & max) * 255 / max) }
	return ch(f.redShift, f.redMax), ch(f.greenShift, f.greenMax), ch(f.blueShift, f.blueMax)
}

// close8 allows the precision a channel of maximum max has.
func close8(got, want uint8, max uint32) bool {
	d := int(got) - int(want)
	tol := int(255/max) + 1
	return d >= -tol && d <= tol
}
