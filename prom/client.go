// Package prom reads usage from a Prometheus-compatible HTTP API
// (/api/v1/query, /api/v1/query_range): KubeVirt's virt-handler metrics
// and node_exporter's, for the current values of VM and node rows and for
// rrddata history. It uses net/http and encoding/json only. Nothing here
// runs on a request path: the poller (Source) and the history cache
// (History) fetch in the background.
package prom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
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
	// HTTP defaults to a client with a 10 s timeout.
	HTTP *http.Client
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

// Query evaluates expr at t (now when zero) and returns its instant vector.
func (c *Client) Query(ctx context.Context, expr string, t time.Time) ([]Sample, error) {
	v := url.Values{"query": {expr}}
	if !t.IsZero() {
		v.Set("time", formatTime(t))
	}
	data, err := c.do(ctx, "/api/v1/query", v)
	if err != nil {
		return nil, err
	}
	return decodeVector(data)
}

// QueryRange evaluates expr from start to end every step and returns the
// matrix.
func (c *Client) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]Series, error) {
	v := url.Values{
		"query": {expr},
		"start": {formatTime(start)},
		"end":   {formatTime(end)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	data, err := c.do(ctx, "/api/v1/query_range", v)
	if err != nil {
		return nil, err
	}
	return decodeMatrix(data)
}

func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', -1, 64)
}

// envelope is the API's answer around data.
type envelope struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

type resultData struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

// do POSTs the form (queries can be long; every Prometheus-compatible
// server accepts form-encoded POST) and returns the "data" member.
func (c *Client) do(ctx context.Context, path string, form url.Values) (*resultData, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+path, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if c.BearerTokenFile != "" {
		tok, err := os.ReadFile(c.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("prometheus bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: %w", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("prometheus %s: reading the answer: %w", path, err)
	}
	return decodeEnvelope(path, res.StatusCode, body)
}

// decodeEnvelope checks the status and returns the data. Prometheus
// answers errors with 400/422/503 and a JSON envelope; proxies in front
// answer with anything.
func decodeEnvelope(path string, status int, body []byte) (*resultData, error) {
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		if status/100 != 2 {
			return nil, fmt.Errorf("prometheus %s: HTTP %d", path, status)
		}
		return nil, fmt.Errorf("prometheus %s: decoding the answer: %w", path, err)
	}
	if env.Status != "success" {
		msg := env.Error
		if msg == "" {
			msg = fmt.Sprintf("status %q", env.Status)
		}
		return nil, fmt.Errorf("prometheus %s: HTTP %d: %s: %s", path, status, env.ErrorType, msg)
	}
	var d resultData
	if err := json.Unmarshal(env.Data, &d); err != nil {
		return nil, fmt.Errorf("prometheus %s: decoding data: %w", path, err)
	}
	return &d, nil
}

// sampleValue is [<unix time>, "<value>"].
type sampleValue [2]json.RawMessage

func (s sampleValue) decode() (Point, error) {
	var t float64
	if err := json.Unmarshal(s[0], &t); err != nil {
		return Point{}, fmt.Errorf("sample time: %w", err)
	}
	var str string
	if err := json.Unmarshal(s[1], &str); err != nil {
		return Point{}, fmt.Errorf("sample value: %w", err)
	}
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return Point{}, fmt.Errorf("sample value: %w", err)
	}
	return Point{T: int64(math.Round(t)), V: v}, nil
}

var errResultType = errors.New("unexpected result type")

func decodeVector(d *resultData) ([]Sample, error) {
	if d.ResultType != "vector" {
		return nil, fmt.Errorf("%w %q (want vector)", errResultType, d.ResultType)
	}
	var raw []struct {
		Metric Labels      `json:"metric"`
		Value  sampleValue `json:"value"`
	}
	if err := json.Unmarshal(d.Result, &raw); err != nil {
		return nil, fmt.Errorf("decoding vector: %w", err)
	}
	out := make([]Sample, 0, len(raw))
	for _, r := range raw {
		p, err := r.Value.decode()
		if err != nil {
			return nil, err
		}
		if !finite(p.V) {
			continue
		}
		out = append(out, Sample{Labels: r.Metric, Value: p.V})
	}
	return out, nil
}

func decodeMatrix(d *resultData) ([]Series, error) {
	if d.ResultType != "matrix" {
		return nil, fmt.Errorf("%w %q (want matrix)", errResultType, d.ResultType)
	}
	var raw []struct {
		Metric Labels        `json:"metric"`
		Values []sampleValue `json:"values"`
	}
	if err := json.Unmarshal(d.Result, &raw); err != nil {
		return nil, fmt.Errorf("decoding matrix: %w", err)
	}
	out := make([]Series, 0, len(raw))
	for _, r := range raw {
		s := Series{Labels: r.Metric, Points: make([]Point, 0, len(r.Values))}
		for _, v := range r.Values {
			p, err := v.decode()
			if err != nil {
				return nil, err
			}
			if finite(p.V) {
				s.Points = append(s.Points, p)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// finite drops NaN and ±Inf ("NaN", "+Inf" on the wire): a division by
// zero in a query is "no value", not a number for a dashboard.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
