package prom

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDecode runs answers through the client: values, NaN and infinities
// dropped, timestamps in seconds, and Prometheus' errors, a proxy's error
// page, garbage and wrong result types as errors that say so.
func TestDecode(t *testing.T) {
	for _, c := range []struct {
		name    string
		status  int
		body    string
		vector  []Sample
		matrix  []Series
		errLike string
	}{
		{name: "vector", status: 200,
			body:   `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"a","name":"vm"},"value":[1700000000.123,"42.5"]},{"metric":{},"value":[1700000000,"NaN"]}]}}`,
			vector: []Sample{{Labels: Labels{"namespace": "a", "name": "vm"}, Value: 42.5}}},
		{name: "empty vector", status: 200, body: `{"status":"success","data":{"resultType":"vector","result":[]}}`, vector: []Sample{}},
		{name: "matrix", status: 200,
			body:   `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"nodename":"n1"},"values":[[1700000040,"1"],[1700000100,"+Inf"],[1700000160.4,"2e3"]]}]}}`,
			matrix: []Series{{Labels: Labels{"nodename": "n1"}, Points: []Point{{1700000040, 1}, {1700000160, 2000}}}}},
		{name: "prometheus error", status: 400, body: `{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`, errLike: "prometheus query: bad_data: parse error at char 3"},
		{name: "proxy error page", status: 502, body: `<html>Bad Gateway</html>`, errLike: "server error: 502"},
		{name: "garbage with 200", status: 200, body: `not json`, errLike: "bad_response"},
		{name: "wrong type", status: 200, body: `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`, errLike: "unexpected result type"},
		{name: "bad value", status: 200, body: `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}`, errLike: "decoding the answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cl := &Client{URL: srv.URL}
			var err error
			if c.matrix != nil {
				var m []Series
				m, err = cl.QueryRange(context.Background(), "up", time.Unix(1700000000, 0), time.Unix(1700000200, 0), time.Minute)
				if err == nil && !reflect.DeepEqual(m, c.matrix) {
					t.Fatalf("matrix %+v, want %+v", m, c.matrix)
				}
			} else {
				var v []Sample
				v, err = cl.Query(context.Background(), "up", time.Time{})
				if err == nil && !reflect.DeepEqual(v, c.vector) {
					t.Fatalf("vector %+v, want %+v", v, c.vector)
				}
			}
			if c.errLike == "" && err != nil {
				t.Fatal(err)
			}
			if c.errLike != "" && (err == nil || !strings.Contains(err.Error(), c.errLike)) {
				t.Fatalf("error %v, want one saying %q", err, c.errLike)
			}
		})
	}
}

// An answer may be as large as the limit, not larger.
func TestAnswerLimit(t *testing.T) {
	read := func(size, limit int) error {
		_, err := io.ReadAll(&limitedBody{ReadCloser: io.NopCloser(bytes.NewReader(make([]byte, size))), left: int64(limit)})
		return err
	}
	if err := read(100, 100); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	if err := read(101, 100); !errors.Is(err, errTooLarge) {
		t.Fatalf("past the limit: %v", err)
	}
}

func TestClientRequests(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		got = append(got, r)
		typ := "vector"
		if strings.HasSuffix(r.URL.Path, "query_range") {
			typ = "matrix"
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"` + typ + `","result":[]}}`))
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL + "/prefix/", BearerTokenFile: tokenFile, Header: http.Header{"X-Scope-Orgid": {"tenant"}}}
	at := time.Unix(1700000000, 500e6)
	if _, err := c.Query(context.Background(), `up{job="x"}`, at); err != nil {
		t.Fatal(err)
	}
	if _, err := c.QueryRange(context.Background(), "up", time.Unix(1700000000, 0), time.Unix(1700004140, 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	q, r := got[0], got[1]
	if q.Method != "POST" || q.URL.Path != "/prefix/api/v1/query" || q.Form.Get("query") != `up{job="x"}` || q.Form.Get("time") != "1700000000.5" {
		t.Errorf("query: %s %s %v", q.Method, q.URL.Path, q.Form)
	}
	if r.URL.Path != "/prefix/api/v1/query_range" || r.Form.Get("start") != "1700000000" || r.Form.Get("end") != "1700004140" || r.Form.Get("step") != "60" {
		t.Errorf("query_range: %s %v", r.URL.Path, r.Form)
	}
	for _, req := range got {
		if req.Header.Get("Authorization") != "Bearer s3cret" || req.Header.Get("X-Scope-OrgID") != "tenant" {
			t.Errorf("headers %v", req.Header)
		}
	}
	c.BearerTokenFile = filepath.Join(t.TempDir(), "missing")
	if _, err := c.Query(context.Background(), "up", time.Time{}); err == nil || !strings.Contains(err.Error(), "bearer token") {
		t.Errorf("missing token file: %v", err)
	}
}
