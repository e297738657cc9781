package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The plugin itself asks a URL for its metadata (query-url-metadata, and
// the size of a download-url). Only http and https are asked, and never an
// address of the host's own or link-local networks: no loopback (the
// plugin, the node's services), link-local (cloud metadata endpoints such
// as 169.254.169.254, fe80::/10), multicast or unspecified address, checked
// on every address actually dialled, so neither a DNS name nor a redirect
// leads there. Private networks (a local mirror) are allowed.

// allowLoopbackURLs lets tests query their own servers on 127.0.0.1. Only
// the test binary sets it.
var allowLoopbackURLs atomic.Bool

// urlPattern is the schema pattern of PVE's url parameters.
var urlPattern = regexp.MustCompile(`^https?://`)

// urlMetadata is query-url-metadata's answer; absent fields are left out,
// as PVE does.
type urlMetadata struct {
	Filename string `json:"filename,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Mimetype string `json:"mimetype,omitempty"`
}

// refusedAddrError is a dial the guard refused.
type refusedAddrError struct {
	ip   net.IP
	kind string
}

func (e *refusedAddrError) Error() string {
	return fmt.Sprintf("refusing to connect to %s (%s address)", e.ip, e.kind)
}

// refusedKind says why an address may not be dialled, "" if it may.
func refusedKind(ip net.IP) string {
	switch {
	case ip == nil:
		return "malformed"
	case ip.IsLoopback():
		if allowLoopbackURLs.Load() {
			return ""
		}
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsMulticast():
		return "multicast"
	}
	return ""
}

// guardedControl refuses, right before connecting, an address the guard
// does not allow: it sees the address DNS gave, for every redirect too.
func guardedControl(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if kind := refusedKind(ip); kind != "" {
		return &refusedAddrError{ip: ip, kind: kind}
	}
	return nil
}

// checkProbeURL parses a URL the plugin may ask: http or https, with a
// host that is not a refused address literal.
func checkProbeURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid URL: only http and https are supported")
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("invalid URL: no host")
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		if kind := refusedKind(ip); kind != "" {
			return nil, &refusedAddrError{ip: ip, kind: kind}
		}
	}
	return u, nil
}

// probeClient is an HTTP client that dials through the guard, follows at
// most 10 redirects and only to http(s), and ignores proxy settings (a
// proxy would dial for it, past the guard).
func probeClient(verify bool, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: guardedControl}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSClientConfig:       &tls.Config{InsecureSkipVerify: !verify}, //nolint:gosec // the caller's verify-certificates=0, as PVE
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		DisableKeepAlives:     true,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect to a %s URL", req.URL.Scheme)
			}
			return nil
		},
	}
}

// probeStatusError is a server's answer other than success.
type probeStatusError struct{ status string }

func (e *probeStatusError) Error() string { return e.status }

var (
	dispositionQuotedRE = regexp.MustCompile(`filename="([^"]*)"`)
	dispositionPlainRE  = regexp.MustCompile(`filename=([^;]*)`)
	urlFileRE           = regexp.MustCompile(`^[^?]+/([^?/]*)(?:\?.*)?$`)
	contentRangeTotalRE = regexp.MustCompile(`/(\d+)\s*$`)
)

// probeURL asks a URL for its metadata the way PVE's query-url-metadata
// does: a HEAD request whose Content-Length, Content-Disposition and
// Content-Type give size, file name and MIME type (the file name falls back
// to the URL's last path segment). Servers that refuse HEAD are asked with
// a GET of the first byte instead, read for its headers only.
func probeURL(ctx context.Context, raw string, verify bool, timeout time.Duration) (urlMetadata, error) {
	if _, err := checkProbeURL(raw); err != nil {
		return urlMetadata{}, err
	}
	cl := probeClient(verify, timeout)
	defer cl.CloseIdleConnections()
	ask := func(method string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, raw, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("User-Agent", "Proxmox VE")
		if method == http.MethodGet {
			req.Header.Set("Range", "bytes=0-0")
		}
		return cl.Do(req)
	}
	res, err := ask(http.MethodHead)
	if err != nil {
		return urlMetadata{}, err
	}
	res.Body.Close()
	size := res.Header.Get("Content-Length")
	if res.StatusCode != http.StatusOK {
		res, err = ask(http.MethodGet)
		if err != nil {
			return urlMetadata{}, err
		}
		res.Body.Close() // the headers are all that is wanted
		switch res.StatusCode {
		case http.StatusPartialContent:
			size = ""
			if m := contentRangeTotalRE.FindStringSubmatch(res.Header.Get("Content-Range")); m != nil {
				size = m[1]
			}
		case http.StatusOK:
			size = res.Header.Get("Content-Length")
		default:
			return urlMetadata{}, &probeStatusError{status: res.Status}
		}
	}
	var out urlMetadata
	if n, err := strconv.ParseInt(strings.TrimSpace(size), 10, 64); err == nil && n > 0 {
		out.Size = n
	}
	if d := res.Header.Get("Content-Disposition"); d != "" {
		if m := dispositionQuotedRE.FindStringSubmatch(d); m != nil {
			out.Filename = m[1]
		} else if m := dispositionPlainRE.FindStringSubmatch(d); m != nil {
			out.Filename = m[1]
		}
	}
	if out.Filename == "" {
		if m := urlFileRE.FindStringSubmatch(raw); m != nil {
			out.Filename = m[1]
		}
	}
	out.Mimetype = res.Header.Get("Content-Type")
	if t, _, found := strings.Cut(out.Mimetype, ";"); found {
		out.Mimetype = t
	}
	return out, nil
}

// probeError words a failed probe as PVE does ("invalid server response:
// '<status line>'"), and a refused address as such.
func probeError(raw string, err error) *apiError {
	var refused *refusedAddrError
	var status *probeStatusError
	switch {
	case errors.As(err, &refused):
		return newError(http.StatusInternalServerError, "%s: not querying '%s'", refused.Error(), raw)
	case errors.As(err, &status):
		return newError(http.StatusInternalServerError, "invalid server response: '%s'", status.status)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return newError(http.StatusInternalServerError, "invalid server response: '500 Can't connect (%v)'", err)
}

// probeHead reads the first n bytes of a URL (a GET of that range; a server
// that sends the whole file is read only that far), through the same guard
// as probeURL.
func probeHead(ctx context.Context, raw string, verify bool, timeout time.Duration, n int) ([]byte, error) {
	if _, err := checkProbeURL(raw); err != nil {
		return nil, err
	}
	cl := probeClient(verify, timeout)
	defer cl.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "Proxmox VE")
	req.Header.Set("Range", fmt.Sprintf("bytes=0-%d", n-1))
	res, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusPartialContent {
		return nil, &probeStatusError{status: res.Status}
	}
	return io.ReadAll(io.LimitReader(res.Body, int64(n)))
}

// fetchStream GETs a URL for a download the plugin streams, through the
// probe's guard and redirect rules, without an overall timeout: the body
// is read as long as it flows, and a server that sends nothing for
// downloadStall cancels the download (stop).
func fetchStream(ctx context.Context, stop context.CancelFunc, raw string, verify bool) (io.ReadCloser, error) {
	if _, err := checkProbeURL(raw); err != nil {
		return nil, err
	}
	cl := probeClient(verify, 30*time.Second)
	cl.Timeout = 0
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "Proxmox VE")
	res, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		return nil, fmt.Errorf("server answered '%s'", res.Status)
	}
	return &stallReader{ReadCloser: res.Body, timer: time.AfterFunc(downloadStall, stop)}, nil
}

// stallReader stops a download whose body does not move for downloadStall.
type stallReader struct {
	io.ReadCloser
	timer *time.Timer
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	if n > 0 {
		s.timer.Reset(downloadStall)
	}
	return n, err
}

func (s *stallReader) Close() error {
	s.timer.Stop()
	return s.ReadCloser.Close()
}
