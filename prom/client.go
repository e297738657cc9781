// Package prom reads usage from a Prometheus-compatible HTTP API
// (/api/v1/query, /api/v1/query_range) through client_golang's API client:
// KubeVirt's virt-handler metrics and node_exporter's, for the current
// values of VM and node rows and for rrddata history. Nothing here runs on
// a request path: the poller (Source) and the history cache (History)
// fetch in the background.
package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Client queries one Prometheus-compatible endpoint.
type Client struct {
	// URL is the server's base URL (http://prometheus:9090, or a path
	// prefix such as https://thanos/prometheus).
	URL string
	// BearerTokenFile is read before every query (tokens rotate), never
	// logged.
	BearerTokenFile string
	// Header is added to every query (tenant ids, basic auth, ...).
	Header http.Header
	// HTTP defaults to a client with a 10 s timeout; its transport carries
	// the queries.
	HTTP *http.Client

	once sync.Once
	api  v1.API
	err  error
}

// Labels of one series.
type Labels map[string]string

// Sample is one value of an instant vector.
type Sample struct {
	Labels Labels
	Value  float64
}

// Point is one value of a range series.
type Point struct {
	T int64 // unix seconds
	V float64
}

// Series is one series of a range matrix.
type Series struct {
	Labels Labels
	Points []Point
}

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// maxAnswer bounds the size of one answer.
const maxAnswer = 64 << 20

// v1API builds the API client once.
func (c *Client) v1API() (v1.API, error) {
	c.once.Do(func() {
		hc := c.HTTP
		if hc == nil {
			hc = defaultHTTP
		}
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		withAuth := *hc
		withAuth.Transport = &transport{base: base, c: c}
		var cl api.Client
		cl, c.err = api.NewClient(api.Config{Address: c.URL, Client: &withAuth})
		if c.err == nil {
			c.api = v1.NewAPI(cl)
		}
	})
	return c.api, c.err
}

// Query evaluates expr at t (now when zero) and returns its instant vector.
func (c *Client) Query(ctx context.Context, expr string, t time.Time) ([]Sample, error) {
	a, err := c.v1API()
	if err != nil {
		return nil, fmt.Errorf("prometheus query: %w", err)
	}
	v, _, err := a.Query(ctx, expr, t)
	if err != nil {
		return nil, queryError("query", err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("prometheus query: %w %q (want vector)", errResultType, v.Type())
	}
	out := make([]Sample, 0, len(vec))
	for _, s := range vec {
		if f := float64(s.Value); finite(f) {
			out = append(out, Sample{Labels: labels(s.Metric), Value: f})
		}
	}
	return out, nil
}

// QueryRange evaluates expr from start to end every step and returns the
// matrix.
func (c *Client) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	a, err := c.v1API()
	if err != nil {
		return nil, fmt.Errorf("prometheus query_range: %w", err)
	}
	v, _, err := a.QueryRange(ctx, expr, v1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, queryError("query_range", err)
	}
	mat, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("prometheus query_range: %w %q (want matrix)", errResultType, v.Type())
	}
	out := make([]Series, 0, len(mat))
	for _, ss := range mat {
		s := Series{Labels: labels(ss.Metric), Points: make([]Point, 0, len(ss.Values))}
		for _, p := range ss.Values {
			if f := float64(p.Value); finite(f) {
				s.Points = append(s.Points, Point{T: int64(math.Round(float64(p.Timestamp) / 1000)), V: f})
			}
		}
		out = append(out, s)
	}
	return out, nil
}

var errResultType = errors.New("unexpected result type")

// queryError says which query failed. The API client answers Prometheus'
// own errors (bad_data, server_error: 502, ...) as *v1.Error and
// transport failures as *url.Error; anything else is an answer it could
// not decode.
func queryError(what string, err error) error {
	var ae *v1.Error
	var ue *url.Error
	if errors.As(err, &ae) || errors.As(err, &ue) || errors.Is(err, errTooLarge) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("prometheus %s: %w", what, err)
	}
	return fmt.Errorf("prometheus %s: decoding the answer: %w", what, err)
}

func labels(m model.Metric) Labels {
	out := make(Labels, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}

// finite drops NaN and ±Inf ("NaN", "+Inf" on the wire): a division by
// zero in a query is "no value", not a number for a dashboard.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// transport adds what every query carries: the bearer token, read from
// its file each time (tokens rotate), and the configured headers. It
// bounds the size of the answers too, which the API client reads whole.
type transport struct {
	base http.RoundTripper
	c    *Client // its BearerTokenFile and Header, as they are at each query
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Accept", "application/json")
	for k, vs := range t.c.Header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	if f := t.c.BearerTokenFile; f != "" {
		tok, err := os.ReadFile(f)
		if err != nil {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, fmt.Errorf("prometheus bearer token: %w", err)
		}
		r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	res, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	res.Body = &limitedBody{ReadCloser: res.Body, left: maxAnswer}
	return res, nil
}

var errTooLarge = fmt.Errorf("answer larger than %d MiB", maxAnswer>>20)

// limitedBody fails a read past its limit instead of buffering it.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the limit: fine if the answer ends here.
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, errTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
