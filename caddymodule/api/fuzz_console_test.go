package api

import (
	"bufio"
	"bytes"
	"io"
	"testing"
)

// FuzzTermInput feeds arbitrary browser messages to the termproxy input
// parser: it ends (no hang), and never yields more bytes than it was sent.
func FuzzTermInput(f *testing.F) {
	f.Add([]byte("0:3:abc1:80:24:20:1:x"))
	f.Add([]byte("0:99999999:"))
	f.Add([]byte("1:65537:1:"))
	f.Add([]byte("0::0:-1:3"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, _ := io.ReadAll(&termInput{r: bufio.NewReader(bytes.NewReader(in))})
		if len(out) > len(in) {
			t.Fatalf("%d bytes out of %d in", len(out), len(in))
		}
	})
}

// FuzzReadLoginLine: the termproxy login line is bounded and never
// contains the newline that ends it.
func FuzzReadLoginLine(f *testing.F) {
	f.Add([]byte("root@pam:PVEVNC:abc\n0:1:x"))
	f.Add(bytes.Repeat([]byte("a"), maxLoginLine+10))
	f.Fuzz(func(t *testing.T, in []byte) {
		line, err := readLoginLine(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			return
		}
		if len(line) > maxLoginLine || bytes.IndexByte([]byte(line), '\n') >= 0 {
			t.Fatalf("login line %q", line)
		}
	})
}
