package hostile_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testutil"
)

var tokenHeader = "Authorization: PVEAPIToken=" + tokenID + "=" + tokenSecret

// sendAndRead writes head, then body from a goroutine (the server may stop
// reading it), and reads one response.
func (s *server) sendAndRead(head string, body io.Reader) (*http.Response, []byte, error) {
	c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		return nil, nil, err
	}
	if body != nil {
		go func() { _, _ = io.Copy(c, body) }()
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, b, nil
}

// chunked encodes r as an HTTP/1.1 chunked body.
func chunked(r io.Reader) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if _, werr := fmt.Fprintf(pw, "%x\r\n%s\r\n", n, buf[:n]); werr != nil {
					pw.CloseWithError(werr)
					return
				}
			}
			if err != nil {
				_, _ = io.WriteString(pw, "0\r\n\r\n")
				pw.Close()
				return
			}
		}
	}()
	return pr
}

// TestBodyLimits: bodies above pveproxy's 64 KiB get a PVE-shaped 413,
// announced ones before the client sends a byte of them; deep and huge
// JSON is refused with a 400 or 413, never parsed into memory.
func TestBodyLimits(t *testing.T) {
	s := start(t, keyA, "")
	deep := func(n int) string { return `{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}` }
	huge := `{"description":"` + strings.Repeat("x", 10<<20) + `"}`
	cases := []struct {
		name, ctype string
		length      string // Content-Length header value; "" = chunked
		body        string
		noBody      bool // announce the length but send nothing
		code        int
		reason      string
	}{
		{"100 MB announced, nothing sent", "application/x-www-form-urlencoded", "104857600", "", true, 413, "request entity too large"},
		{"1 MiB form, chunked", "application/x-www-form-urlencoded", "", "bogus=" + strings.Repeat("x", 1<<20), false, 413, "request entity too large"},
		{"64 KiB + 1 form", "application/x-www-form-urlencoded", "65537", "bogus=" + strings.Repeat("x", 65537-6), false, 413, "request entity too large"},
		{"exactly 64 KiB form", "application/x-www-form-urlencoded", "65536", "bogus=" + strings.Repeat("x", 65536-6), false, 400, "Parameter verification failed."},
		{"JSON nested 1e5 deep", "application/json", fmt.Sprint(len(deep(100000))), deep(100000), false, 413, "request entity too large"},
		{"JSON nested 1e5 deep, chunked", "application/json", "", deep(100000), false, 413, "request entity too large"},
		{"JSON nested 32000 deep (fits in 64 KiB)", "application/json", fmt.Sprint(len(deep(32000))), deep(32000), false, 400, ""},
		{"10 MB JSON", "application/json", fmt.Sprint(len(huge)), huge, false, 413, "request entity too large"},
		{"10 MB JSON, chunked", "application/json", "", huge, false, 413, "request entity too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\nContent-Type: %s\r\n", vmPath, tokenHeader, c.ctype)
			var body io.Reader
			if c.length == "" {
				head += "Transfer-Encoding: chunked\r\n\r\n"
				body = chunked(strings.NewReader(c.body))
			} else {
				head += "Content-Length: " + c.length + "\r\n\r\n"
				if !c.noBody {
					body = strings.NewReader(c.body)
				}
			}
			res, raw, err := s.sendAndRead(head, body)
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != c.code || (c.reason != "" && res.Status != fmt.Sprintf("%d %s", c.code, c.reason)) || !pveShaped(raw) {
				t.Fatalf("got %s %.200q, want %d %s", res.Status, raw, c.code, c.reason)
			}
			if c.noBody && !res.Close {
				t.Fatal("413 of an unsent body kept the connection open (the server would wait to drain it)")
			}
			t.Logf("%s: %s %.120s", c.name, res.Status, raw)
		})
	}
}

// trickle opens a connection, writes head, then one byte of rest every
// interval until the server closes the connection. It returns when the
// server cut it off (with the status it answered, if any) or after limit.
func (s *server) trickle(head, rest string, interval, limit time.Duration) (cut time.Duration, status string, err error) {
	c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	begin := time.Now()
	if _, err := io.WriteString(c, head); err != nil {
		return 0, "", err
	}
	closed := make(chan string, 1)
	go func() {
		_ = c.SetReadDeadline(begin.Add(limit))
		br := bufio.NewReader(c)
		st := ""
		if res, err := http.ReadResponse(br, nil); err == nil {
			st = res.Status
			_, _ = io.Copy(io.Discard, res.Body)
		}
		_, _ = io.Copy(io.Discard, br) // until EOF: the server closed
		closed <- st
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case st := <-closed:
			if time.Since(begin) >= limit {
				return 0, st, fmt.Errorf("still open after %s", limit)
			}
			return time.Since(begin), st, nil
		case <-tick.C:
			if i < len(rest) {
				_, _ = c.Write([]byte{rest[i]}) // fails once the server is gone
			}
		}
	}
}

// TestSlowClientsAreCutOff: with the timeouts the README recommends
// (scaled down), slowloris headers and a trickled body are cut off and
// the server's goroutines return to where they were.
func TestSlowClientsAreCutOff(t *testing.T) {
	s := start(t, keyA, "\t\t\tread_header 2s\n\t\t\tread_body_idle 2s 100\n\t\t\tidle 5s")
	base := testutil.SettledGoroutineBaseline()
	const headers, bodies = 50, 20
	var wg sync.WaitGroup
	type result struct {
		kind   string
		cut    time.Duration
		status string
		err    error
	}
	results := make(chan result, headers+bodies)
	for i := 0; i < headers+bodies; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i < headers {
				cut, st, err := s.trickle("GET /api2/json/nodes HTTP/1.1\r\nHost: 127.0.0.1\r\n", strings.Repeat("X-Slow: 1\r\n", 100), 300*time.Millisecond, 30*time.Second)
				results <- result{"headers", cut, st, err}
				return
			}
			head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n", vmPath, tokenHeader)
			cut, st, err := s.trickle(head, "bogus="+strings.Repeat("x", 994), 300*time.Millisecond, 30*time.Second)
			results <- result{"body", cut, st, err}
		}()
	}
	// While they trickle, the server answers others.
	time.Sleep(time.Second)
	if a := s.raw(request("GET", "/api2/json/version", []string{tokenHeader}, "")); a.code != 200 {
		t.Fatalf("a normal request during the trickle: %s %v", a.status, a.err)
	}
	wg.Wait()
	close(results)
	worst := map[string]time.Duration{}
	statuses := map[string]map[string]int{"headers": {}, "body": {}}
	for r := range results {
		if r.err != nil {
			t.Errorf("%s trickle: %v", r.kind, r.err)
			continue
		}
		worst[r.kind] = max(worst[r.kind], r.cut)
		statuses[r.kind][r.status]++
		if r.kind == "body" && r.status != "400 request body timed out" {
			t.Errorf("trickled body answered %q, want PVE's 400", r.status)
		}
	}
	t.Logf("slowloris headers (%d): cut after <= %s, answers %v", headers, worst["headers"].Round(time.Millisecond), statuses["headers"])
	t.Logf("trickled bodies (%d): cut after <= %s, answers %v", bodies, worst["body"].Round(time.Millisecond), statuses["body"])
	base.Check(t, 30*time.Second)
}

// TestSlowBodyWithoutTimeouts: with Caddy's default timeouts (a body may
// stall a minute between bytes, with no minimum rate) the handler's own
// deadline still ends a trickled API body.
func TestSlowBodyWithoutTimeouts(t *testing.T) {
	s := start(t, keyA, "")
	base := testutil.SettledGoroutineBaseline()
	head := fmt.Sprintf("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n", vmPath, tokenHeader)
	cut, st, err := s.trickle(head, "bogus="+strings.Repeat("x", 994), 500*time.Millisecond, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trickled body cut after %s, answer %q", cut.Round(time.Millisecond), st)
	if st != "400 request body timed out" {
		t.Errorf("answer %q, want a PVE 400", st)
	}
	base.Check(t, 30*time.Second)
}

// TestManyPartialConnections: 500 connections that send half a request
// line each hold a goroutine while open (and do not stop the server from
// answering), and release it when they close.
func TestManyPartialConnections(t *testing.T) {
	s := start(t, keyA, "")
	base := testutil.SettledGoroutineBaseline()
	const n = 500
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", s.addr, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /api2/json/no"); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the server to hold the connections", func() bool { return runtime.NumGoroutine() >= base.Count()+n*9/10 })
	peak := runtime.NumGoroutine()
	if a := s.raw(request("GET", "/api2/json/version", []string{tokenHeader}, "")); a.code != 200 {
		t.Fatalf("a normal request beside %d partial ones: %s %v", n, a.status, a.err)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	base.Check(t, 30*time.Second)
	t.Logf("goroutines: baseline %d, with %d partial requests %d, after they closed %d", base.Count(), n, peak, runtime.NumGoroutine())
}
