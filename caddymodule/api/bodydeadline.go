package api

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// bodyReadTimeout bounds reading an API request body (at most 64 KiB).
// Caddy's default read_body_idle only cuts a body that stalls, so without
// this a client trickling one byte a minute would hold a goroutine for
// weeks. Through Caddy's idle reader a handler deadline can only tighten
// the server's timeouts, never loosen them.
const bodyReadTimeout = 15 * time.Second

// deadlineBody lifts the read deadline once the body has been read to its
// end, so that the server's background read of an idle connection does
// not cancel a request that is still being answered.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}

// hasBody tells whether r may have a body.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// boundBody puts a read deadline on r's body, if it has one. A body that
// ends early (the 413 of an oversized one) keeps the deadline, which then
// also bounds the server's drain of the rest.
func boundBody(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(bodyReadTimeout)) != nil {
		return // the writer cannot set deadlines (tests' recorders)
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
}
