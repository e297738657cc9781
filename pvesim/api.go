package pvesim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// apiError is a PVE error: status code and message (the reason phrase).
type apiError struct {
	code   int
	msg    string
	errors map[string]string
}

func newErr(code int, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP serves /api2/json/...
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, "/api2/json")
	if !ok {
		writeErr(w, r, newErr(501, "Method '%s %s' not implemented", r.Method, r.URL.Path))
		return
	}
	if p == "" {
		p = "/"
	}
	key := r.Method + " " + p
	s.mu.Lock()
	s.calls[key]++
	delay, f := s.faultFor(key)
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if f != nil {
		writeErr(w, r, &apiError{code: f.code, msg: f.msg})
		return
	}
	if !s.authorized(r) {
		// PVE answers auth failures with an empty body.
		writeErr(w, r, newErr(401, "No ticket"))
		return
	}
	params, err := readParams(r)
	if err != nil {
		writeErr(w, r, newErr(400, "Parameter verification failed."))
		return
	}
	data, extra, aerr := s.route(r.Method, strings.Split(strings.Trim(p, "/"), "/"), params)
	if aerr != nil {
		writeErr(w, r, aerr)
		return
	}
	writeData(w, data, extra)
}

// authorized checks "Authorization: PVEAPIToken=<id>=<secret>".
func (s *Sim) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	v, ok := strings.CutPrefix(h, "PVEAPIToken=")
	if !ok {
		v, ok = strings.CutPrefix(h, "PVEAPIToken ")
	}
	if !ok {
		return false
	}
	i := strings.LastIndex(v, "=")
	if i < 0 {
		return false
	}
	id, _ := url.PathUnescape(v[:i])
	return id == s.opts.TokenID && v[i+1:] == s.opts.TokenSecret
}

// readParams merges the query with a JSON or form body, as pveproxy does.
func readParams(r *http.Request) (map[string]string, error) {
	out := map[string]string{}
	for k, vs := range r.URL.Query() {
		out[k] = vs[0]
	}
	if r.Body == nil || r.Method == http.MethodGet {
		return out, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil || len(bytes.TrimSpace(body)) == 0 {
		return out, err
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, err
		}
		for k, v := range m {
			switch x := v.(type) {
			case bool:
				out[k] = "0"
				if x {
					out[k] = "1"
				}
			case string:
				out[k] = x
			default:
				out[k] = strings.Trim(string(mustJSON(x)), `"`)
			}
		}
		return out, nil
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range form {
		out[k] = vs[0]
	}
	return out, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// route answers one API call.
func (s *Sim) route(method string, seg []string, params map[string]string) (any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	notImpl := newErr(501, "Method '%s /%s' not implemented", method, strings.Join(seg, "/"))
	get := method == http.MethodGet
	switch {
	case get && len(seg) == 1 && seg[0] == "version":
		v, r := s.versionLocked()
		return map[string]any{"version": v, "release": r, "repoid": "2a5fa54a8503f96d"}, nil, nil
	case get && len(seg) == 2 && seg[0] == "cluster" && seg[1] == "status":
		if err := s.checkLocked("/", "Sys.Audit"); err != nil {
			return nil, nil, err
		}
		return s.clusterStatusLocked(), nil, nil
	case get && len(seg) == 2 && seg[0] == "cluster" && seg[1] == "resources":
		return s.resourcesLocked(params["type"]), nil, nil
	case get && len(seg) == 1 && seg[0] == "nodes":
		rows := []map[string]any{}
		for _, n := range s.opts.Nodes {
			rows = append(rows, s.nodeRowLocked(n))
		}
		return rows, nil, nil
	case method == http.MethodPost && len(seg) == 3 && seg[0] == "nodes" && seg[2] == "wakeonlan":
		data, aerr := s.wakeOnLANLocked(seg[1])
		return data, nil, aerr
	case len(seg) >= 2 && seg[0] == "nodes":
		node := seg[1]
		if !s.hasNode(node) {
			return nil, nil, newErr(500, "hostname lookup '%s' failed - failed to get address info for: %s: Name or service not known", node, node)
		}
		if s.offLocked(node) && node != s.localNodeLocked() {
			// pveproxy proxies the call to the node, which does not answer.
			return nil, nil, newErr(595, "No route to host")
		}
		return s.nodeRouteLocked(method, node, seg[2:], params)
	}
	return nil, nil, notImpl
}

func (s *Sim) nodeRouteLocked(method, node string, seg []string, params map[string]string) (any, map[string]any, *apiError) {
	get := method == http.MethodGet
	notImpl := newErr(501, "Method '%s /nodes/%s/%s' not implemented", method, node, strings.Join(seg, "/"))
	switch {
	case get && len(seg) == 1 && seg[0] == "status":
		if err := s.checkLocked("/nodes/"+node, "Sys.Audit"); err != nil {
			return nil, nil, err
		}
		return s.nodeStatusLocked(), nil, nil
	case get && len(seg) == 1 && (seg[0] == "lxc" || seg[0] == "qemu"):
		rows := []map[string]any{}
		for _, id := range s.sortedIDsLocked() {
			g := s.guests[id]
			if g.spec.Kind == seg[0] && g.spec.Node == node && s.allowedLocked(fmt.Sprintf("/vms/%d", id), "VM.Audit") {
				rows = append(rows, g.statusRowLocked(false))
			}
		}
		return rows, nil, nil
	case len(seg) >= 3 && seg[0] == "tasks" && seg[2] == "status" && get:
		t := s.tasks[seg[1]]
		if t == nil || t.node != node {
			return nil, nil, &apiError{code: 400, msg: "Parameter verification failed.", errors: map[string]string{"upid": "no such task"}}
		}
		return t.statusRow(), nil, nil
	case len(seg) >= 3 && seg[0] == "tasks" && seg[2] == "log" && get:
		t := s.tasks[seg[1]]
		if t == nil || t.node != node {
			return nil, nil, &apiError{code: 400, msg: "Parameter verification failed.", errors: map[string]string{"upid": "no such task"}}
		}
		start, _ := strconv.Atoi(params["start"])
		limit, _ := strconv.Atoi(params["limit"])
		rows, total := t.logRows(start, limit)
		return rows, map[string]any{"total": total}, nil
	case len(seg) >= 2 && (seg[0] == "lxc" || seg[0] == "qemu"):
		vmid, err := strconv.Atoi(seg[1])
		if err != nil {
			return nil, nil, &apiError{code: 400, msg: "Parameter verification failed.", errors: map[string]string{"vmid": "type check ('integer') failed - got '" + seg[1] + "'"}}
		}
		if err := s.guestPermLocked(method, vmid, seg[2:]); err != nil {
			return nil, nil, err
		}
		g := s.guests[vmid]
		if g == nil || g.spec.Kind != seg[0] || g.spec.Node != node {
			dir := "lxc"
			if seg[0] == "qemu" {
				dir = "qemu-server"
			}
			return nil, nil, newErr(500, "Configuration file 'nodes/%s/%s/%d.conf' does not exist", node, dir, vmid)
		}
		return s.guestRouteLocked(method, g, seg[2:], params, notImpl)
	}
	return nil, nil, notImpl
}

func (s *Sim) guestRouteLocked(method string, g *guest, seg []string, params map[string]string, notImpl *apiError) (any, map[string]any, *apiError) {
	get := method == http.MethodGet
	path := strings.Join(seg, "/")
	switch {
	case get && path == "status/current":
		return g.statusRowLocked(true), nil, nil
	case get && path == "config":
		return g.configLocked(), nil, nil
	case method == http.MethodPost && len(seg) == 2 && seg[0] == "status":
		upid, aerr := s.powerLocked(g, seg[1], params)
		if aerr != nil {
			return nil, nil, aerr
		}
		return upid, nil, nil
	case get && path == "interfaces" && g.spec.Kind == "lxc":
		if g.status != "running" {
			return nil, nil, nil // get_interfaces finds no pid
		}
		return g.lxcInterfacesLocked(), nil, nil
	case get && path == "agent/network-get-interfaces" && g.spec.Kind == "qemu":
		if g.spec.NoAgent {
			return nil, nil, newErr(500, "No QEMU guest agent configured")
		}
		if g.status != "running" {
			return nil, nil, newErr(500, "VM %d is not running", g.spec.VMID)
		}
		if g.paused() || time.Since(g.since) < g.spec.BootDelay || g.spec.AgentNotRunning {
			return nil, nil, newErr(500, "QEMU guest agent is not running")
		}
		return g.agentInterfacesLocked(), nil, nil
	}
	return nil, nil, notImpl
}

// guestPermLocked is the permission check PVE makes before a guest's
// API method runs (its "permissions" in qemu-server and pve-container).
func (s *Sim) guestPermLocked(method string, vmid int, seg []string) *apiError {
	path := fmt.Sprintf("/vms/%d", vmid)
	sub := strings.Join(seg, "/")
	switch {
	case method == http.MethodPost && len(seg) == 2 && seg[0] == "status":
		return s.checkLocked(path, "VM.PowerMgmt")
	case sub == "agent/network-get-interfaces":
		return s.checkLocked(path, s.agentPrivs()...)
	}
	return s.checkLocked(path, "VM.Audit")
}

// versionLocked is the PVE version the simulator plays.
func (s *Sim) versionLocked() (version, release string) {
	if s.opts.Version >= 9 {
		return "9.1.1", "9.1"
	}
	return "8.4.1", "8.4"
}

func (s *Sim) sortedIDsLocked() []int {
	ids := make([]int, 0, len(s.guests))
	for id := range s.guests {
		ids = append(ids, id)
	}
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
	return ids
}

// writeData answers {"data": v} plus extra top-level keys.
func writeData(w http.ResponseWriter, v any, extra map[string]any) {
	body := map[string]any{"data": v}
	for k, x := range extra {
		body[k] = x
	}
	buf, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json;charset=UTF-8")
	h.Set("Cache-Control", "max-age=0")
	h.Set("Content-Length", strconv.Itoa(len(buf)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}

// writeErr answers like pveproxy: the message as the reason phrase (which
// net/http cannot set, hence the hijack) and {"data":null,"message":...}.
func writeErr(w http.ResponseWriter, r *http.Request, e *apiError) {
	body := map[string]any{"data": nil}
	if e.code != 401 {
		body["message"] = e.msg + "\n"
	}
	if len(e.errors) > 0 {
		errs := map[string]string{}
		for k, v := range e.errors {
			errs[k] = v + "\n"
		}
		body["errors"] = errs
	}
	buf, _ := json.Marshal(body)
	if e.code == 595 {
		// pveproxy relays AnyEvent::HTTP's connection error: no body.
		buf = nil
	}
	phrase := strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, e.msg)
	if r.ProtoMajor == 1 {
		if conn, brw, err := http.NewResponseController(w).Hijack(); err == nil {
			defer conn.Close()
			fmt.Fprintf(brw, "HTTP/1.%d %03d %s\r\nContent-Type: application/json;charset=UTF-8\r\nCache-Control: max-age=0\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", r.ProtoMinor, e.code, phrase, len(buf))
			if r.Method != http.MethodHead {
				_, _ = brw.Write(buf)
			}
			_ = brw.Flush()
			return
		}
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(e.code)
	_, _ = w.Write(buf)
}
