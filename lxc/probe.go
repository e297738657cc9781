package lxc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// probeClient is shared by HTTP probes; it never follows redirects (a 3xx
// is an answer) and keeps no connections (the guest may vanish).
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil, ResponseHeaderTimeout: 2 * time.Second},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
	Timeout: 3 * time.Second,
}

// A service usually answers within a second or two of its guest running,
// and every moment between its first answer and the next probe is added to
// each held request. So probing starts fast and slows down as it goes on:
// the pause is a twentieth of the time spent probing so far (a held request
// waits at most about 5 % longer than the service took to come up), never
// under fastProbeInterval and never over probe_interval. A service that takes
// ten seconds sees under two hundred probes, not thousands.
const (
	fastProbeInterval = 5 * time.Millisecond
	probeSlowdown     = 20
)

// probeWait is the pause before the next probe, probing having begun
// elapsed ago.
func probeWait(elapsed, interval time.Duration) time.Duration {
	return min(interval, max(fastProbeInterval, elapsed/probeSlowdown))
}

// probe checks once that the guest's service answers; path is the http
// probe's path, or the datagram the udp probe sends.
func probe(ctx context.Context, kind, host string, port int, path string) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	switch kind {
	case ProbeNone:
		return nil
	case ProbeUDP:
		return probeUDP(ctx, addr, []byte(path))
	case ProbeHTTP:
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "caddy-proxmox-probe")
		res, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if res.StatusCode < 200 || res.StatusCode > 399 {
			return fmt.Errorf("http probe %s: status %d", path, res.StatusCode)
		}
		return nil
	default:
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	}
}
