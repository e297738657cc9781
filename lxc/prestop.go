package lxc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// DefaultPreStopTimeout bounds one pre_stop_check request.
const DefaultPreStopTimeout = 5 * time.Second

// preStopRecheck is the longest wait before asking a guest that said it
// was busy again.
const preStopRecheck = time.Minute

// preStopClient asks pre_stop_check URLs. It never follows a redirect (a
// 3xx is an answer, and counts as busy: the check only ever reaches the
// URL configured, never a place a guest points it to), uses no proxy
// from the environment and keeps no connections.
var preStopClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// preStopState is the guest's pre-stop check: one at a time, and a pass
// that holds only for the idle period it was asked in.
type preStopState struct {
	running bool
	// passedFor is the last activity a passing check saw; the pass is
	// used by the next idle check if nothing happened since.
	passed    bool
	passedFor time.Time
	// why is the last busy answer, "" when the last check passed.
	why string
}

// preStopPlaceholders are what a pre_stop_check URL may contain.
var preStopPlaceholders = []string{"{guest.address}", "{guest.port}", "{guest.vmid}", "{guest.node}", "{guest.name}"}

// validatePreStopURL checks a pre_stop_check URL with its placeholders
// filled in.
func validatePreStopURL(raw string) error {
	r := strings.NewReplacer("{guest.address}", "192.0.2.1", "{guest.port}", "80", "{guest.vmid}", "100", "{guest.node}", "pve", "{guest.name}", "guest")
	u, err := url.Parse(r.Replace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("pre_stop_check %q must be an http(s) URL", raw)
	}
	if strings.ContainsAny(r.Replace(raw), "{}") {
		return fmt.Errorf("pre_stop_check %q: unknown placeholder (want %s)", raw, strings.Join(preStopPlaceholders, ", "))
	}
	return nil
}

// preStopPendingLocked runs pre_stop_check before an idle stop: true
// means the stop waits (a check is asked, or is under way). A pass counts
// only if no activity came since it was asked.
func (g *Guest) preStopPendingLocked(cfg GuestConfig) bool {
	if cfg.PreStopCheck == "" {
		return false
	}
	ps := &g.preStop
	if ps.passed && ps.passedFor.Equal(g.lastActivity) {
		ps.passed = false
		return false
	}
	ps.passed = false
	if !ps.running {
		ps.running = true
		go g.runPreStopCheck(cfg, g.lastActivity)
	}
	return true
}

// runPreStopCheck asks the URL and acts on the answer: a 2xx lets the
// idle check stop the guest; anything else, an error or a timeout says
// it is busy, and the check is asked again later.
func (g *Guest) runPreStopCheck(cfg GuestConfig, activity time.Time) {
	timeout := cfg.PreStopTimeout
	if timeout <= 0 {
		timeout = DefaultPreStopTimeout
	}
	ctx, cancel := context.WithTimeout(g.ctx, timeout)
	defer cancel()
	why := g.askPreStop(ctx, cfg)
	g.mu.Lock()
	ps := &g.preStop
	ps.running = false
	if g.ctx.Err() != nil {
		g.mu.Unlock()
		return
	}
	if why != ps.why {
		if why != "" {
			g.logger.Info("idle stop deferred: pre_stop_check says the guest is busy", zap.String("why", why))
		} else if ps.why != "" {
			g.logger.Info("pre_stop_check: the guest may stop now")
		}
	}
	ps.why = why
	if why != "" {
		g.armIdleLocked(min(cfg.IdleTimeout, preStopRecheck))
		g.mu.Unlock()
		return
	}
	ps.passed, ps.passedFor = true, activity
	g.mu.Unlock()
	g.idleCheck()
}

// askPreStop makes the request: "" if it answered 2xx, else why not.
func (g *Guest) askPreStop(ctx context.Context, cfg GuestConfig) string {
	raw := cfg.PreStopCheck
	host := ""
	if strings.Contains(raw, "{guest.address}") {
		var err error
		if host, err = g.checkAddress(ctx, cfg); err != nil {
			return "no address for {guest.address}: " + err.Error()
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	g.mu.Lock()
	t, name := g.target, g.name
	g.mu.Unlock()
	u := strings.NewReplacer("{guest.address}", host, "{guest.port}", strconv.Itoa(cfg.Port),
		"{guest.vmid}", strconv.Itoa(t.vmid), "{guest.node}", t.node, "{guest.name}", url.PathEscape(name)).Replace(raw)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("User-Agent", "caddy-proxmox-pre-stop-check")
	res, err := preStopClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "no answer in time"
		}
		return err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return "HTTP " + strconv.Itoa(res.StatusCode)
	}
	return ""
}

// checkAddress is the guest's address for the check: the configured one,
// the one its wake found, or, for a guest someone else started, the one
// discovery finds now.
func (g *Guest) checkAddress(ctx context.Context, cfg GuestConfig) (string, error) {
	if cfg.Address != "" {
		return cfg.Address, nil
	}
	g.mu.Lock()
	host, c := g.host, g.currentLocked().c
	g.mu.Unlock()
	if host != "" {
		return host, nil
	}
	if c == nil || c.Client() == nil {
		return "", errors.New("cluster not connected")
	}
	t := g.liveTarget()
	nc, err := readNetConfig(ctx, c.Client(), t)
	if err != nil {
		return "", err
	}
	a, err := discoverAddress(ctx, c.Client(), t, nc, nil)
	if err == nil && a == "" {
		err = errors.New("not known yet")
	}
	return a, err
}
