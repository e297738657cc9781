package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// contentType is what pveproxy sends with every JSON answer.
const contentType = "application/json;charset=UTF-8"

// apiError is an error answered the way pveproxy answers it: the status
// code, the message as the HTTP reason phrase, and a JSON body with
// data:null, the message and per-parameter errors.
type apiError struct {
	Code    int
	Message string
	Errors  map[string]string
	// kubeDenied marks a 403 of Kubernetes itself (not of this API's own
	// checks), which the router words as PVE does.
	kubeDenied bool
	// authFailed marks a failed login, answered after pveproxy's delay.
	authFailed bool
}

func (e *apiError) Error() string { return e.Message }

// newError builds an apiError; the message is formatted like fmt.Sprintf.
func newError(code int, format string, args ...any) *apiError {
	return &apiError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// paramError is PVE's 400 "Parameter verification failed." with errors
// naming the parameters. Clients retry 5xx, so bad input is never a 5xx.
func paramError(errs map[string]string) *apiError {
	return &apiError{Code: http.StatusBadRequest, Message: "Parameter verification failed.", Errors: errs}
}

// paramErr is paramError for a single parameter.
func paramErr(param, format string, args ...any) *apiError {
	return paramError(map[string]string{param: fmt.Sprintf(format, args...)})
}

// writeData answers {"data": v} plus any extra top-level keys (e.g. total).
func writeData(w http.ResponseWriter, v any, extra map[string]any) {
	if e, ok := v.(*encodedBody); ok && extra == nil {
		writeJSON(w, http.StatusOK, e.bytes())
		e.release()
		return
	}
	body := map[string]any{"data": v}
	for k, x := range extra {
		body[k] = x
	}
	buf, err := json.Marshal(body)
	if err != nil {
		writeError(w, nil, newError(http.StatusInternalServerError, "encoding the answer: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, buf)
}

// writeJSON sends a JSON body with pveproxy's headers.
func writeJSON(w http.ResponseWriter, code int, body []byte) {
	// Canonical keys set directly, their values in one allocation: this
	// runs for every answer.
	h := w.Header()
	v := []string{contentType, "max-age=0", strconv.Itoa(len(body))}
	h["Content-Type"], h["Cache-Control"], h["Content-Length"] = v[0:1:1], v[1:2:2], v[2:3:3]
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// errorBody is the JSON body of an error answer.
func errorBody(e *apiError) []byte {
	body := map[string]any{"data": nil}
	if e.Message != "" {
		body["message"] = strings.TrimRight(e.Message, "\n") + "\n"
	}
	if len(e.Errors) > 0 {
		errs := map[string]string{}
		for k, v := range e.Errors {
			errs[k] = strings.TrimRight(v, "\n") + "\n"
		}
		body["errors"] = errs
	}
	buf, _ := json.Marshal(body)
	return buf
}

// reasonPhrase makes a message safe for a status line: one line, no
// control characters, bounded.
func reasonPhrase(msg string) string {
	msg = strings.TrimSpace(msg)
	if i := strings.IndexAny(msg, "\r\n"); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > 512 {
		msg = msg[:512]
	}
	return msg
}

// writeError answers e. Over HTTP/1.x the message goes into the status
// line, as pveproxy does, because proxmoxer and go-proxmox show only the
// reason phrase. Where that cannot be done (HTTP/2 has no reason phrase)
// the standard phrase is used and the message is in the body.
func writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	body := errorBody(e)
	if r != nil && r.ProtoMajor == 1 && writeWithReason(w, r, e.Code, reasonPhrase(e.Message), body) {
		return
	}
	writeJSON(w, e.Code, body)
}

// writeWithReason answers with a reason phrase of its own. net/http
// cannot set one, so the connection is hijacked, the answer written by
// hand, and the connection closed. It reports false, having written
// nothing, when the connection cannot be hijacked.
func writeWithReason(w http.ResponseWriter, r *http.Request, code int, reason string, body []byte) bool {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	defer conn.Close()
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "max-age=0")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Connection", "close")
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.%d %03d %s\r\n", r.ProtoMinor, code, reason)
	for _, k := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, reasonPhrase(v))
		}
	}
	b.WriteString("\r\n")
	if r.Method != http.MethodHead {
		b.Write(body)
	}
	writeAll(brw, b.Bytes())
	// Caddy's access log and HTTP metrics learn the status only from
	// WriteHeader on the writers that wrap ours; net/http's own writer
	// ignores it on a hijacked connection (noting so at debug level).
	w.WriteHeader(code)
	return true
}

func writeAll(brw *bufio.ReadWriter, p []byte) {
	_, _ = brw.Write(p)
	_ = brw.Flush()
}
