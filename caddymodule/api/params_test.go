package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseParams(t *testing.T) {
	cases := []struct {
		name, method, target, ctype, body string
		want                              map[string]string
		code                              int
	}{
		{"query on GET", "GET", "/x?type=vm&full=1", "", "", map[string]string{"type": "vm", "full": "1"}, 0},
		{"form without content type (Telmate login)", "POST", "/x", "", "username=root%40pam&password=a+b", map[string]string{"username": "root@pam", "password": "a b"}, 0},
		{"form merged with query", "POST", "/x?vmid=100", "application/x-www-form-urlencoded", "name=web", map[string]string{"vmid": "100", "name": "web"}, 0},
		{"typed JSON (go-proxmox)", "POST", "/x", "application/json", `{"vmid":100,"start":true,"name":"a","x":null,"f":1.5}`, map[string]string{"vmid": "100", "start": "1", "name": "a", "f": "1.5"}, 0},
		{"JSON with charset", "PUT", "/x", "application/json; charset=utf-8", `{"a":"b"}`, map[string]string{"a": "b"}, 0},
		{"nested JSON refused", "POST", "/x", "application/json", `{"a":{"b":1}}`, nil, 400},
		{"broken JSON", "POST", "/x", "application/json", `{"a":`, nil, 400},
		{"DELETE with a body", "DELETE", "/x", "", "purge=1", nil, 501},
		{"body on GET ignored", "GET", "/x?a=1", "", "b=2", map[string]string{"a": "1"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
			if c.ctype != "" {
				r.Header.Set("Content-Type", c.ctype)
			}
			p, e := parseParams(r)
			if c.code != 0 {
				if e == nil || e.Code != c.code {
					t.Fatalf("want error %d, got %v", c.code, e)
				}
				return
			}
			if e != nil {
				t.Fatalf("error %v", e)
			}
			if len(p) != len(c.want) {
				t.Fatalf("params %v, want %v", p, c.want)
			}
			for k, v := range c.want {
				if p[k] != v {
					t.Fatalf("%s = %q, want %q", k, p[k], v)
				}
			}
		})
	}
}

func TestParseParamsBodyLimit(t *testing.T) {
	r := httptest.NewRequest("POST", "/x", strings.NewReader("a="+strings.Repeat("x", maxBodyBytes)))
	_, e := parseParams(r)
	if e == nil || e.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("want 413, got %v", e)
	}
}

func TestParamAccessors(t *testing.T) {
	p := params{"a": "yes", "b": "maybe", "n": "42", "d": "1\x002", "neg": "-1"}
	if v, e := p.boolean("a", false); e != nil || !v {
		t.Fatal("a")
	}
	if _, e := p.boolean("b", false); e == nil || !strings.Contains(e.Errors["b"], "boolean") {
		t.Fatalf("b: %v", e)
	}
	if v, e := p.integer("n", 0, 0, 100); e != nil || v != 42 {
		t.Fatal("n")
	}
	if _, e := p.integer("neg", 0, 0, 100); e == nil || e.Errors["neg"] != "value must have a minimum value of 0" {
		t.Fatalf("neg: %v", e)
	}
	if _, _, e := p.str("d"); e == nil {
		t.Fatal("duplicate values must be refused")
	}
	if e := p.allowOnly("a", "b", "n", "d"); e == nil || e.Errors["neg"] == "" {
		t.Fatalf("allowOnly: %v", e)
	}
}

func TestCleanAPIPath(t *testing.T) {
	for in, want := range map[string]string{
		"/api2/json/nodes/":               "/api2/json/nodes",
		"/api2/json//cluster//ha/groups/": "/api2/json/cluster/ha/groups",
		"/api2/json":                      "/api2/json",
	} {
		if got := cleanAPIPath(in); got != want {
			t.Errorf("cleanAPIPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPathTemplate(t *testing.T) {
	for in, want := range map[string]string{
		"/nodes/pve1/qemu/100/vncproxy":                     "/nodes/{node}/qemu/{id}/vncproxy",
		"/nodes/pve1/tasks/UPID:pve1:0:0:0:x:1:root@pam:/x": "/nodes/{node}/tasks/{upid}/x",
		"/evil/" + strings.Repeat("a", 100):                 "/{unknown}",
	} {
		if got := pathTemplate(in); got != want {
			t.Errorf("pathTemplate(%q) = %q, want %q", in, got, want)
		}
	}
}
