package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestCredentialMatrix: hostile or broken credentials are all refused
// with PVE's 401 and reason phrase, and none reaches an endpoint.
func TestCredentialMatrix(t *testing.T) {
	a := shared(t)
	anon := *a
	anon.Auth = nil
	var login map[string]any
	anon.OK("POST", "/access/ticket", url.Values{"username": {"alice@pve"}, "password": {"s3cret"}}, &login)
	ticket := login["ticket"].(string)
	csrf := login["CSRFPreventionToken"].(string)
	parts := strings.Split(ticket, ":")
	tampered := strings.Join([]string{parts[0], "root@pam", parts[2], parts[3], parts[4]}, ":")
	oldTime := strings.Join([]string{parts[0], parts[1], "5F000000", parts[3], parts[4]}, ":")

	cases := []struct {
		name   string
		method string
		set    func(r *http.Request)
		reason string
	}{
		{"nothing", "GET", func(r *http.Request) {}, "No ticket"},
		{"token, wrong secret", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken="+testToken+"=nope") }, "Authentication failed!"},
		{"token, secret of another token", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken=root@pam!other="+testSecret) }, "Authentication failed!"},
		{"token, no secret", "GET", func(r *http.Request) { r.Header.Set("Authorization", "PVEAPIToken="+testToken) }, "Authentication failed!"},
		{"token, lower-case scheme", "GET", func(r *http.Request) { r.Header.Set("Authorization", "pveapitoken="+testToken+"="+testSecret) }, "No ticket"},
		{"ticket, user swapped", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: tampered}) }, "Authentication failed!"},
		{"ticket, time changed", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: oldTime}) }, "Authentication failed!"},
		{"ticket, signature cut", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket[:len(ticket)-4]}) }, "Authentication failed!"},
		{"ticket, corral-style PVE:user:secret", "GET", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: "PVE:alice@pve:s3cret"}) }, "Authentication failed!"},
		{"ticket write, no CSRF", "POST", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket}) }, "Permission denied - invalid csrf token"},
		{"ticket write, CSRF of a changed time", "POST", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket})
			r.Header.Set("CSRFPreventionToken", "5F000000"+csrf[8:])
		}, "Permission denied - invalid csrf token"},
		{"ticket write, the ticket as CSRF", "PUT", func(r *http.Request) {
			r.AddCookie(&http.Cookie{Name: "PVEAuthCookie", Value: ticket})
			r.Header.Set("CSRFPreventionToken", ticket)
		}, "Permission denied - invalid csrf token"},
		{"CSRF without a ticket", "POST", func(r *http.Request) { r.Header.Set("CSRFPreventionToken", csrf) }, "No ticket"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, a.Base+"/api2/json/nodes/kv-node-1-lab-internal/qemu/101/config", strings.NewReader("cores=7"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			c.set(req)
			res, err := a.C.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 401 || res.Status != "401 "+c.reason {
				t.Fatalf("got %q, want 401 %s", res.Status, c.reason)
			}
		})
	}
	// Nothing above changed the VM.
	var cfg map[string]any
	a.OK("GET", "/nodes/kv-node-2-lab-internal/qemu/101/config", nil, &cfg)
	if cfg["cores"] == float64(7) {
		t.Fatal("a refused request changed the VM")
	}
	// Login failures.
	for _, form := range []url.Values{
		{"username": {"alice@pve"}, "password": {"S3cret"}},
		{"username": {"alice@pam"}, "password": {"s3cret"}},
		{"username": {"ALICE@pve"}, "password": {"s3cret"}},
		{"username": {"root@pam"}, "password": {ticket}},
		{"username": {"alice@pve"}, "password": {tampered}},
	} {
		if ans := anon.Do("POST", "/access/ticket", form); ans.Code != 401 || ans.Status != "401 authentication failure" {
			t.Errorf("%v: %s", form, ans.Status)
		}
	}
}
