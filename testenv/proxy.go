package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// SubresourceGroup is the aggregated API group served by KubeVirt's virt-api.
const SubresourceGroup = "subresources.kubevirt.io"

// Proxy is an HTTPS front proxy in front of kube-apiserver: every request
// goes to kube-apiserver unchanged (Authorization, Impersonate-*, watches,
// upgrades), so virt-api's subresources.kubevirt.io is served by
// kube-apiserver's own aggregator. The proxy only plays what cannot run
// here: other servers' aggregated APIs (metrics-server's with
// SetMetricsAPI, cdi-apiserver's upload tokens with SetAPI), and the
// absence of an API group (HideGroup).
type Proxy struct {
	// URL is https://127.0.0.1:port.
	URL string

	env *Env
	srv *httptest.Server
	rp  *httputil.ReverseProxy
	// played are the aggregated APIs the proxy serves itself, by group.
	played atomic.Pointer[map[string]playedAPI]
	// hidden are the API groups the proxy pretends are not installed.
	hidden atomic.Pointer[[]string]

	mu          sync.Mutex
	kubeconfigs map[string]string
	closeOnce   sync.Once
}

// NewProxy starts another front proxy on the same cluster, e.g. one that
// hides subresources.kubevirt.io, to test both the virt-api and the
// fallback path against one shared cluster. It is closed by Env.Stop (or
// earlier by Close).
func (e *Env) NewProxy() (*Proxy, error) {
	target, err := url.Parse(e.APIServerURL)
	if err != nil {
		return nil, err
	}
	p := &Proxy{env: e, kubeconfigs: map[string]string{}}
	transport := &http.Transport{
		Proxy:               nil,
		TLSClientConfig:     &tls.Config{RootCAs: e.pki.certPool()},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
		// Pass the client's Accept-Encoding through as it is: Go's transport
		// would otherwise ask kube-apiserver for gzip on behalf of a client
		// that did not, and inflate the answer itself, so that kube-apiserver
		// compressed whatever the client asked.
		DisableCompression: true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			if p.augmentDiscovery(r.In) {
				prepareDiscoveryRequest(r.Out)
			}
		},
		Transport:      transport,
		FlushInterval:  -1, // watches and other streams: flush every write
		ModifyResponse: p.modifyResponse,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, context.Canceled) {
				e.logger().Debug("testenv proxy: upstream error", zap.String("path", r.URL.Path), zap.Error(err))
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := httptest.NewUnstartedServer(p)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{e.pki.serving},
		NextProtos:   []string{"h2", "http/1.1"}, // http/1.1 for websockets
	}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake noise
	srv.StartTLS()
	p.srv = srv
	p.URL = srv.URL
	e.mu.Lock()
	e.proxies = append(e.proxies, p)
	e.mu.Unlock()
	return p, nil
}

// MetricsGroup is the aggregated API group of metrics-server.
const MetricsGroup = "metrics.k8s.io"

// SetMetricsAPI installs (nil removes) a handler for /apis/metrics.k8s.io
// and everything below it, playing metrics-server behind the aggregator;
// GET /apis then lists metrics.k8s.io/v1beta1. The handler sees absolute
// paths and does its own authorization (none, like a permissive cluster).
func (p *Proxy) SetMetricsAPI(h http.Handler) { p.SetAPI(MetricsGroup, "v1beta1", h) }

// playedAPI is an aggregated API group the proxy serves in place of the
// server an APIService would name.
type playedAPI struct {
	version string
	h       http.Handler
}

// SetAPI installs (nil removes) a handler for /apis/<group> and everything
// below it, playing the extension API server an APIService for
// group/version would route to (e.g. cdi-apiserver's
// upload.cdi.kubevirt.io); GET /apis then lists group/version. The handler
// sees absolute paths and the caller's own headers, and does its own
// authorization.
func (p *Proxy) SetAPI(group, version string, h http.Handler) {
	for {
		old := p.played.Load()
		next := map[string]playedAPI{}
		if old != nil {
			for g, a := range *old {
				next[g] = a
			}
		}
		if h == nil {
			delete(next, group)
		} else {
			next[group] = playedAPI{version: version, h: h}
		}
		if p.played.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (p *Proxy) playedAPIs() map[string]playedAPI {
	if m := p.played.Load(); m != nil {
		return *m
	}
	return nil
}

// playedFor is the played API serving path, if any.
func (p *Proxy) playedFor(path string) http.Handler {
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return nil
	}
	group, _, _ := strings.Cut(rest, "/")
	if a, ok := p.playedAPIs()[group]; ok {
		return a.h
	}
	return nil
}

// HideGroup makes the proxy answer 404 for /apis/<group> and everything
// below it, and leave the group out of GET /apis, as kube-apiserver does
// for a group no APIService serves: with Options.VirtAPI,
// HideGroup(SubresourceGroup) gives a view of the cluster without virt-api.
func (p *Proxy) HideGroup(group string) {
	for {
		old := p.hidden.Load()
		var groups []string
		if old != nil {
			groups = append(groups, *old...)
		}
		groups = append(groups, group)
		if p.hidden.CompareAndSwap(old, &groups) {
			return
		}
	}
}

func (p *Proxy) hiddenGroups() []string {
	if h := p.hidden.Load(); h != nil {
		return *h
	}
	return nil
}

func (p *Proxy) isHidden(path string) bool {
	for _, g := range p.hiddenGroups() {
		if prefix := "/apis/" + g; path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

// notFoundBody is kube-apiserver's answer for a path nothing serves.
const notFoundBody = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
	`"message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}`

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.isHidden(r.URL.Path) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, notFoundBody)
		return
	}
	if h := p.playedFor(r.URL.Path); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	p.rp.ServeHTTP(w, r)
}

// Close stops the proxy. Active connections (watches, websockets) are cut.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.srv.CloseClientConnections()
		done := make(chan struct{})
		go func() { p.srv.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.env.logger().Warn("testenv proxy: handlers still running after close")
		}
	})
}

// Config returns a rest.Config for user (see Env.ConfigFor) that goes
// through this proxy.
func (p *Proxy) Config(user string) *rest.Config {
	return p.env.configAt(p.URL, user)
}

// Kubeconfig writes (once) and returns the path of a kubeconfig file for
// user pointing at this proxy.
func (p *Proxy) Kubeconfig(user string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if path, ok := p.kubeconfigs[user]; ok {
		return path
	}
	u := p.env.user(user)
	port := p.URL[strings.LastIndex(p.URL, ":")+1:]
	path := filepath.Join(p.env.Dir, "kubeconfig-"+port+"-"+sanitize(user)+".yaml")
	if err := writeKubeconfig(path, p.URL, p.env.pki.caPEM, u.Name, u.Token); err != nil {
		panic("testenv: write kubeconfig: " + err.Error())
	}
	p.kubeconfigs[user] = path
	return path
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

func writeKubeconfig(path, server string, ca []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

// --- discovery: GET /apis as the stand-ins change it ----------------------
//
// A real cluster with metrics-server lists metrics.k8s.io in /apis. For
// every played API the proxy adds its group/version to kube-apiserver's
// answer, and drops hidden groups from it, in both the legacy
// (APIGroupList) and the aggregated (apidiscovery.k8s.io/v2
// APIGroupDiscoveryList) JSON forms. The aggregated form lists the added
// version with no resources.

func (p *Proxy) augmentDiscovery(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Path == "/apis" &&
		(len(p.playedAPIs()) > 0 || len(p.hiddenGroups()) > 0)
}

// prepareDiscoveryRequest asks for uncompressed JSON and no 304, so that the
// response can be edited.
func prepareDiscoveryRequest(out *http.Request) {
	out.Header.Del("Accept-Encoding")
	out.Header.Del("If-None-Match")
	if acc := out.Header.Get("Accept"); acc != "" {
		var keep []string
		for _, part := range strings.Split(acc, ",") {
			if !strings.Contains(part, "protobuf") {
				keep = append(keep, strings.TrimSpace(part))
			}
		}
		if len(keep) > 0 {
			out.Header.Set("Accept", strings.Join(keep, ","))
		}
	}
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	if resp.Request == nil || !p.augmentDiscovery(resp.Request) || resp.StatusCode != http.StatusOK ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.Header.Get("Content-Encoding") != "" {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	for group, a := range p.playedAPIs() {
		if nb, ok := addGroup(body, group, a.version); ok {
			body = nb
			resp.Header.Del("ETag")
		}
	}
	for _, g := range p.hiddenGroups() {
		if nb, ok := removeGroup(body, g); ok {
			body = nb
			resp.Header.Del("ETag")
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

func addGroup(body []byte, group, version string) ([]byte, bool) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, false
	}
	gv := map[string]any{"groupVersion": group + "/" + version, "version": version}
	switch doc["kind"] {
	case "APIGroupList":
		groups, _ := doc["groups"].([]any)
		for _, g := range groups {
			if m, _ := g.(map[string]any); m["name"] == group {
				return nil, false
			}
		}
		doc["groups"] = append(groups, map[string]any{
			"name": group, "versions": []any{gv}, "preferredVersion": gv,
		})
	case "APIGroupDiscoveryList":
		items, _ := doc["items"].([]any)
		for _, it := range items {
			if m, _ := it.(map[string]any); m != nil {
				if md, _ := m["metadata"].(map[string]any); md["name"] == group {
					return nil, false
				}
			}
		}
		doc["items"] = append(items, map[string]any{
			"metadata": map[string]any{"name": group, "creationTimestamp": nil},
			"versions": []any{map[string]any{"version": version, "resources": []any{}, "freshness": "Current"}},
		})
	default:
		return nil, false
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, false
	}
	return out, true
}

// removeGroup drops group from a discovery document (either form).
func removeGroup(body []byte, group string) ([]byte, bool) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, false
	}
	key, nameOf := "", func(map[string]any) any { return nil }
	switch doc["kind"] {
	case "APIGroupList":
		key, nameOf = "groups", func(m map[string]any) any { return m["name"] }
	case "APIGroupDiscoveryList":
		key, nameOf = "items", func(m map[string]any) any {
			md, _ := m["metadata"].(map[string]any)
			return md["name"]
		}
	default:
		return nil, false
	}
	items, _ := doc[key].([]any)
	keep := make([]any, 0, len(items))
	for _, it := range items {
		if m, _ := it.(map[string]any); m != nil && nameOf(m) == group {
			continue
		}
		keep = append(keep, it)
	}
	if len(keep) == len(items) {
		return nil, false
	}
	doc[key] = keep
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, false
	}
	return out, true
}
