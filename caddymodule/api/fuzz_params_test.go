package api

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzParseParams feeds arbitrary queries and bodies to the parameter
// parser: it either returns parameters or a PVE error (400, 413 or 501),
// and a body above the limit is always a 413.
func FuzzParseParams(f *testing.F) {
	f.Add("POST", "", "vmid=100&name=a+b&x=%zz", "")
	f.Add("PUT", "application/json", "", `{"cores":2,"a":null,"b":true,"c":1.5e3}`)
	f.Add("POST", "application/json; charset=utf-8", "a=1&a=2", `{"a":{"b":[1]}}`)
	f.Add("POST", "application/json", "", strings.Repeat("[", 20000))
	f.Add("DELETE", "", "purge=1", "x=1")
	f.Add("PUT", "multipart/form-data; boundary=x", ";;;", "--x\r\n")
	f.Fuzz(func(t *testing.T, method, ctype, query, body string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: "/x", RawQuery: query}, Header: http.Header{},
			Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}
		if ctype != "" {
			r.Header.Set("Content-Type", ctype)
		}
		p, e := parseParams(r)
		if e != nil {
			switch e.Code {
			case 400, 413, 501:
			default:
				t.Fatalf("status %d %q", e.Code, e.Message)
			}
			if e.Message == "" {
				t.Fatal("error without a message")
			}
			return
		}
		if len(body) > maxBodyBytes {
			t.Fatalf("a %d-byte body was accepted", len(body))
		}
		if p == nil {
			t.Fatal("nil params without an error")
		}
	})
}
