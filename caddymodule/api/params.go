package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// maxBodyBytes matches pveproxy's limit for API posts (64 KiB): enough for
// any config, small enough that no body can exhaust memory.
const maxBodyBytes = 64 << 10

// params are a request's parameters, merged from the query string and the
// body the way pveproxy does it (AnyEvent.pm extract_params).
type params map[string]string

// parseParams reads the query for every method and, for POST/PUT, a body
// that is urlencoded unless its Content-Type says JSON (Telmate posts with
// no Content-Type at all; go-proxmox posts typed JSON).
func parseParams(r *http.Request) (params, *apiError) {
	p := params{}
	if r.URL.RawQuery != "" {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return nil, newError(http.StatusBadRequest, "malformed query string")
		}
		for k, vs := range q {
			p[k] = strings.Join(vs, "\x00")
		}
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || isUploadPath(r.URL.Path) {
		return p, nil // an upload's body is its own (postUpload)
	}
	if r.ContentLength > maxBodyBytes {
		// Refuse before reading: a client announcing a huge body gets its
		// answer without sending it, and the server closes the connection
		// instead of draining it.
		return nil, newError(http.StatusRequestEntityTooLarge, "request entity too large")
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newError(http.StatusRequestEntityTooLarge, "request entity too large")
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, newError(http.StatusBadRequest, "request body timed out")
		}
		// The error names the connection's addresses: keep it out of answers.
		return nil, newError(http.StatusBadRequest, "request body could not be read")
	}
	if len(body) == 0 {
		return p, nil
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut:
	case http.MethodDelete:
		return nil, newError(http.StatusNotImplemented, "Unexpected content for method '%s'", r.Method)
	default:
		return p, nil
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "application/json" {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, newError(http.StatusBadRequest, "malformed JSON body: %v", err)
		}
		for k, v := range m {
			s, ok := jsonScalar(v)
			if !ok {
				return nil, paramErr(k, "type check ('string') failed - got a nested value")
			}
			if v == nil {
				continue // like a parameter that was not sent
			}
			p[k] = s
		}
		return p, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, newError(http.StatusBadRequest, "malformed form body")
	}
	for k, vs := range form {
		p[k] = strings.Join(vs, "\x00")
	}
	return p, nil
}

// jsonScalar renders a JSON value as the string PVE's schema check would
// see: numbers as written, booleans as 1/0.
func jsonScalar(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", true
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		if x {
			return "1", true
		}
		return "0", true
	default:
		return "", false
	}
}

// str returns a single-valued parameter; repeated values are an error,
// as a PVE scalar parameter cannot hold two.
func (p params) str(name string) (string, bool, *apiError) {
	v, ok := p[name]
	if !ok {
		return "", false, nil
	}
	if strings.Contains(v, "\x00") {
		return "", true, paramErr(name, "duplicate parameter (multiple values not allowed)")
	}
	return v, true, nil
}

// boolean parses a PVE boolean (1/0, yes/no, on/off, true/false).
func (p params) boolean(name string, def bool) (bool, *apiError) {
	v, ok, e := p.str(name)
	if e != nil || !ok {
		return def, e
	}
	switch strings.ToLower(v) {
	case "1", "yes", "on", "true":
		return true, nil
	case "0", "no", "off", "false":
		return false, nil
	}
	return def, paramErr(name, "type check ('boolean') failed - got '%s'", v)
}

// integer parses an integer in [lo, hi].
func (p params) integer(name string, def, lo, hi int64) (int64, *apiError) {
	v, ok, e := p.str(name)
	if e != nil || !ok {
		return def, e
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return def, paramErr(name, "type check ('integer') failed - got '%s'", v)
	}
	if n < lo {
		return def, paramErr(name, "value must have a minimum value of %d", lo)
	}
	if n > hi {
		return def, paramErr(name, "value may not exceed %d", hi)
	}
	return n, nil
}

// allowOnly refuses parameters not in allowed, as PVE's schema does for
// additionalProperties:0.
func (p params) allowOnly(allowed ...string) *apiError {
	set := map[string]bool{}
	for _, a := range allowed {
		set[a] = true
	}
	errs := map[string]string{}
	for k := range p {
		if !set[k] {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		}
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

// pathWildcards names the {wildcards} of a route's path.
func pathWildcards(path string) []string {
	var names []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			names = append(names, strings.TrimSuffix(strings.Trim(seg, "{}"), "..."))
		}
	}
	return names
}

// fromPath takes path parameters the query or body repeats, as
// pve-manager's HTTPServer does: the same value is accepted (bpg sends
// node and storage with download-url), another one is refused. The copy
// is dropped; handlers read path parameters from the path.
func (p params) fromPath(path *pathValues) *apiError {
	for i, name := range path.names {
		v, ok := p[name]
		if !ok {
			continue
		}
		if v != path.vals[i] {
			return paramErr(name, "duplicate parameter (already defined in URI) with conflicting values!")
		}
		delete(p, name)
	}
	return nil
}

// vmid reads a required vmid-typed parameter (vmid, newid).
func (p params) vmid(name string) (int, *apiError) {
	v, ok, e := p.str(name)
	if e != nil {
		return 0, e
	}
	if !ok {
		return 0, paramErr(name, "property is missing and it is not optional")
	}
	id, err := translate.ParseVMID(v)
	if err != nil {
		return 0, paramErr(name, "%v", err)
	}
	return id, nil
}
