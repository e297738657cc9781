package api

import "time"

// queryURLTimeout bounds query-url-metadata's request to the server.
const queryURLTimeout = 10 * time.Second

// getQueryURLMetadata asks a URL for its file name, size and MIME type,
// like PVE's query-url-metadata (bpg asks before every download).
func (h *APIHandler) getQueryURLMetadata(q *request) (any, *apiError) {
	if _, e := h.node(q); e != nil {
		return nil, e
	}
	if e := q.p.allowOnly("url", "verify-certificates"); e != nil {
		return nil, e
	}
	raw, e := urlParam(q)
	if e != nil {
		return nil, e
	}
	verify, e := q.p.boolean("verify-certificates", true)
	if e != nil {
		return nil, e
	}
	if _, err := checkProbeURL(raw); err != nil {
		return nil, probeError(raw, err)
	}
	meta, err := probeURL(q.ctx(), raw, verify, queryURLTimeout)
	if err != nil {
		return nil, probeError(raw, err)
	}
	return meta, nil
}

// urlParam is the required url parameter, checked against PVE's pattern.
func urlParam(q *request) (string, *apiError) {
	raw, ok, e := q.p.str("url")
	switch {
	case e != nil:
		return "", e
	case !ok:
		return "", paramErr("url", "property is missing and it is not optional")
	case !urlPattern.MatchString(raw):
		return "", paramErr("url", "value does not match the regex pattern")
	}
	return raw, nil
}
