package testcaddy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// PVE is a small Proxmox API client for tests. It keeps the raw status
// line, so that reason phrases can be asserted, and decodes the envelope.
type PVE struct {
	T    testing.TB
	Base string
	C    *http.Client
	// Auth adds credentials to each request.
	Auth func(r *http.Request)
}

// Answer is a decoded API answer.
type Answer struct {
	Code    int
	Status  string
	Data    json.RawMessage
	Message string
	Errors  map[string]string
	Total   *int
	Raw     []byte
}

// Do sends a request; GET and DELETE put form in the query. It fails the
// test on a transport error or a body that is not JSON, so it must run on
// the test's goroutine; other goroutines use Send.
func (a *PVE) Do(method, path string, form url.Values) Answer {
	a.T.Helper()
	ans, err := a.Send(method, path, form)
	if err != nil {
		a.T.Fatal(err)
	}
	return ans
}

// Send is Do without failing the test: safe on any goroutine.
func (a *PVE) Send(method, path string, form url.Values) (Answer, error) {
	var body io.Reader
	target := a.Base + "/api2/json" + path
	if method == "GET" || method == "DELETE" {
		if len(form) > 0 {
			target += "?" + form.Encode()
		}
	} else if form != nil {
		body = strings.NewReader(form.Encode())
	}
	ctype := ""
	if body != nil {
		ctype = "application/x-www-form-urlencoded"
	}
	return a.SendBody(method, target, ctype, body)
}

// SendBody sends body (of Content-Type ctype) to target, a path under
// /api2/json or a whole URL.
func (a *PVE) SendBody(method, target, ctype string, body io.Reader) (Answer, error) {
	path := target
	if !strings.Contains(target, "://") {
		target = a.Base + "/api2/json" + target
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		return Answer{}, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if a.Auth != nil {
		a.Auth(req)
	}
	res, err := a.C.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var env struct {
		Data    json.RawMessage   `json:"data"`
		Message string            `json:"message"`
		Errors  map[string]string `json:"errors"`
		Total   *int              `json:"total"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return Answer{}, fmt.Errorf("%s %s: %s: body is not JSON: %q", method, path, res.Status, raw)
	}
	return Answer{Code: res.StatusCode, Status: res.Status, Data: env.Data, Message: env.Message, Errors: env.Errors, Total: env.Total, Raw: raw}, nil
}

// OK sends a request that must succeed and decodes data into into.
func (a *PVE) OK(method, path string, form url.Values, into any) {
	a.T.Helper()
	ans := a.Do(method, path, form)
	if ans.Code != 200 {
		a.T.Fatalf("%s %s: %s %s", method, path, ans.Status, ans.Raw)
	}
	if into != nil {
		if err := json.Unmarshal(ans.Data, into); err != nil {
			a.T.Fatalf("%s %s: decoding %s: %v", method, path, ans.Data, err)
		}
	}
}

// WaitTask polls a task like bpg and proxmoxer do and returns its exit status.
func (a *PVE) WaitTask(upid string) string {
	a.T.Helper()
	return a.WaitTaskWithin(upid, time.Minute)
}

// WaitTaskWithin is WaitTask giving up after limit, for tasks whose end
// waits on something slower than a task's usual minute.
func (a *PVE) WaitTaskWithin(upid string, limit time.Duration) string {
	a.T.Helper()
	parts := strings.Split(upid, ":")
	if len(parts) != 9 {
		a.T.Fatalf("UPID %q has %d fields, want 9", upid, len(parts))
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var st map[string]any
		a.OK("GET", "/nodes/"+parts[1]+"/tasks/"+upid+"/status", nil, &st)
		if st["status"] == "stopped" {
			return st["exitstatus"].(string)
		}
		if _, has := st["exitstatus"]; has {
			a.T.Fatalf("running task carries exitstatus: %v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.T.Fatalf("task %s did not end within %v", upid, limit)
	return ""
}

// Status returns status/current of a VM.
func (a *PVE) Status(node, vmid string) map[string]any {
	a.T.Helper()
	var st map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+vmid+"/status/current", nil, &st)
	return st
}

// TokenAuth authenticates with a PVE API token.
func TokenAuth(id, secret string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken="+id+"="+secret) }
}

// FirstNode is the name of the first node GET /nodes lists, as PVE
// clients see it.
func (a *PVE) FirstNode() string {
	a.T.Helper()
	var nodes []map[string]any
	a.OK("GET", "/nodes", nil, &nodes)
	if len(nodes) == 0 {
		a.T.Fatal("GET /nodes lists no node")
	}
	name, _ := nodes[0]["node"].(string)
	return name
}

// Form is a form of key, value pairs.
func Form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}
