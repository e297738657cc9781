package api

import (
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
)

// hostileBodies are request bodies meant to exhaust memory: all must be
// refused after reading at most the 64 KiB limit.
var hostileBodies = []struct {
	name, ctype, body string
	announce          bool // send Content-Length (else the length is unknown, as when chunked)
}{
	{"10MB JSON chunked", "application/json", `{"a":"` + strings.Repeat("x", 10<<20) + `"}`, false},
	{"10MB JSON announced", "application/json", `{"a":"` + strings.Repeat("x", 10<<20) + `"}`, true},
	{"JSON 1e5 deep chunked", "application/json", `{"a":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`, false},
	{"JSON 32000 deep", "application/json", `{"a":` + strings.Repeat("[", 32000) + strings.Repeat("]", 32000) + `}`, true},
	{"10MB form chunked", "application/x-www-form-urlencoded", "a=" + strings.Repeat("x", 10<<20), false},
	{"64KiB of empty params", "application/x-www-form-urlencoded", strings.Repeat("&", 64<<10), true},
}

func hostileRequest(ctype, body string, announce bool) *http.Request {
	r := &http.Request{Method: "PUT", URL: &url.URL{Path: "/x"}, Header: http.Header{"Content-Type": {ctype}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1}
	if announce {
		r.ContentLength = int64(len(body))
	}
	return r
}

// TestHostileBodiesBoundedMemory: parsing a hostile body allocates a
// bounded amount, whatever its size (10 MB bodies cost well under 1 MiB).
func TestHostileBodiesBoundedMemory(t *testing.T) {
	for _, c := range hostileBodies {
		const runs = 10
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < runs; i++ {
			if _, e := parseParams(hostileRequest(c.ctype, c.body, c.announce)); e == nil || (e.Code != 400 && e.Code != 413) {
				t.Fatalf("%s: %v", c.name, e)
			}
		}
		runtime.ReadMemStats(&after)
		perCall := (after.TotalAlloc - before.TotalAlloc) / runs
		t.Logf("%s (%d bytes): %d bytes allocated per call", c.name, len(c.body), perCall)
		if perCall > 1<<20 {
			t.Errorf("%s: %d bytes allocated per call", c.name, perCall)
		}
	}
}

// BenchmarkParseParamsHostile reports bytes/op of refusing each hostile
// body (go test -bench ParseParamsHostile -benchmem ./caddymodule/api).
func BenchmarkParseParamsHostile(b *testing.B) {
	for _, c := range hostileBodies {
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = parseParams(hostileRequest(c.ctype, c.body, c.announce))
			}
		})
	}
}
