package lxc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ClusterConfig is how to reach one Proxmox VE cluster.
type ClusterConfig struct {
	// Name is the cluster's name in proxmox_wake references.
	Name string
	// URLs are API entry points (https://pve:8006); the first is the
	// primary, the others are failover targets.
	URLs []string
	// TokenID (user@realm!name) and TokenSecret authenticate.
	TokenID     string
	TokenSecret string
	// TLSTrustedCACerts are PEM files of CAs to trust for the API.
	TLSTrustedCACerts []string
	// TLSInsecureSkipVerify disables certificate checks (lab use).
	TLSInsecureSkipVerify bool
	// PollInterval is the period of the cluster-wide resources poll.
	PollInterval time.Duration
	// RequestTimeout bounds every API call.
	RequestTimeout time.Duration
	// Simulate serves the cluster from an in-process pvesim demo.
	Simulate bool
	// WakeNodes, when set, wakes a guest's powered-off node first.
	WakeNodes *NodeWake
}

// Defaults of ClusterConfig.
const (
	DefaultPollInterval   = 5 * time.Second
	DefaultRequestTimeout = 15 * time.Second
)

// Validate checks a cluster config without contacting anything.
func (c *ClusterConfig) Validate() error {
	if c.Name == "" || strings.ContainsAny(c.Name, "/ \t") {
		return fmt.Errorf("cluster name %q must be non-empty without '/' or spaces", c.Name)
	}
	if c.WakeNodes != nil {
		if err := c.WakeNodes.validate(); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	if c.Simulate {
		if len(c.URLs) > 0 || c.TokenID != "" {
			return fmt.Errorf("cluster %s: simulate excludes url and token_id", c.Name)
		}
		return nil
	}
	if len(c.URLs) == 0 {
		return fmt.Errorf("cluster %s: at least one url is required", c.Name)
	}
	for _, u := range c.URLs {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" {
			return fmt.Errorf("cluster %s: url %q must be http(s)://host[:port]", c.Name, u)
		}
	}
	user, tok, ok := strings.Cut(c.TokenID, "!")
	if !ok || !strings.Contains(user, "@") || tok == "" {
		return fmt.Errorf("cluster %s: token_id %q must look like user@realm!name", c.Name, c.TokenID)
	}
	if c.TokenSecret == "" {
		return fmt.Errorf("cluster %s: token_secret is required", c.Name)
	}
	if c.PollInterval < 0 || (c.PollInterval > 0 && c.PollInterval < 50*time.Millisecond) {
		return fmt.Errorf("cluster %s: poll_interval must be at least 50ms", c.Name)
	}
	return nil
}

// withDefaults returns the config with zero values defaulted.
func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	return c
}

// key identifies a cluster runtime: same name and same settings share one
// runtime (and one poller) across config reloads. The secret is hashed,
// never kept in clear in the key.
func (c ClusterConfig) key() string {
	h := sha256.New()
	fmt.Fprintf(h, "%q|%q|%q|%q|%v|%v|%v|%v", c.URLs, c.TokenID, c.TokenSecret, c.TLSTrustedCACerts,
		c.TLSInsecureSkipVerify, c.PollInterval, c.RequestTimeout, c.Simulate)
	if c.WakeNodes != nil {
		fmt.Fprintf(h, "|wake_nodes %s", c.WakeNodes)
	}
	return c.Name + "|" + hex.EncodeToString(h.Sum(nil)[:12])
}

// Stop methods.
const (
	StopShutdown = "shutdown"
	StopStop     = "stop"
	StopSuspend  = "suspend"
)

// Probe kinds.
const (
	ProbeTCP  = "tcp"
	ProbeHTTP = "http"
	ProbeNone = "none"
	ProbeUDP  = "udp"
)

// GuestConfig is how one guest is woken, checked and put to sleep.
type GuestConfig struct {
	// IdleTimeout is how long the guest may go without activity before
	// it is stopped; 0 never stops it.
	IdleTimeout time.Duration
	// WakeTimeout bounds a whole wake, start to ready.
	WakeTimeout time.Duration
	// StopMethod is shutdown (graceful, then forced after StopTimeout),
	// stop, or suspend.
	StopMethod string
	// StopTimeout is the graceful shutdown time before forcing.
	StopTimeout time.Duration
	// Address is the guest's host (IP or name) if it is not discovered.
	Address string
	// Port is the service port probed and proxied to.
	Port int
	// Probe is tcp, http, udp or none. ProbePath is the http probe's
	// path, or the datagram the udp probe sends (ready on any answer).
	Probe     string
	ProbePath string
	// ProbeInterval is the period of readiness checks once the service has
	// been probed for 10 s; before that they run every 5ms at most (probe.go).
	ProbeInterval time.Duration
	// ReadyAfter is an extra settle delay after the probe passes.
	ReadyAfter time.Duration
	// RetryBackoff is the first back-off after a failed wake; it doubles
	// per failure up to MaxBackoff.
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// TaskPollInterval is the period of task and status checks in a wake.
	TaskPollInterval time.Duration
	// KeepWarm windows keep the guest from idling out, and start it when
	// they open.
	KeepWarm []Window
	// TimeZone is where KeepWarm's clock times are (nil: local time).
	TimeZone *time.Location
	// DependsOn are guests (vmids or names in the same cluster) woken
	// first, in parallel, and kept awake while this guest is up.
	DependsOn []string
	// LeaveExternal never stops a guest that was started outside Caddy
	// (by default such a start counts as activity and the guest idles out
	// like any other).
	LeaveExternal bool
	// BusyIf, PreStopCheck (with PreStopTimeout) and StreamIdleTimeout
	// are activity the proxy cannot see, and streams that stop counting
	// as activity: busy.go, prestop.go, streams.go.
	BusyIf            []BusyRule
	PreStopCheck      string
	PreStopTimeout    time.Duration
	StreamIdleTimeout time.Duration
	// needAddress is false for implicit dependencies, which are never
	// proxied to: running is ready for them.
	needAddress bool
}

// Guest config defaults.
const (
	DefaultIdleTimeout      = 15 * time.Minute
	DefaultWakeTimeout      = 2 * time.Minute
	DefaultStopTimeout      = time.Minute
	DefaultPort             = 80
	DefaultProbeInterval    = 100 * time.Millisecond
	DefaultRetryBackoff     = 10 * time.Second
	DefaultMaxBackoff       = 5 * time.Minute
	DefaultTaskPollInterval = 200 * time.Millisecond
)

// WithDefaults returns the config with zero values defaulted.
func (c GuestConfig) WithDefaults() GuestConfig {
	if c.WakeTimeout == 0 {
		c.WakeTimeout = DefaultWakeTimeout
	}
	if c.StopMethod == "" {
		c.StopMethod = StopShutdown
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Probe == "" {
		c.Probe = ProbeTCP
	}
	if c.Probe == ProbeHTTP && c.ProbePath == "" {
		c.ProbePath = "/"
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.RetryBackoff == 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.RetryBackoff {
		c.MaxBackoff = c.RetryBackoff
	}
	if c.TaskPollInterval == 0 {
		c.TaskPollInterval = DefaultTaskPollInterval
	}
	c.needAddress = true
	return c
}

// Validate checks a guest config.
func (c GuestConfig) Validate() error {
	switch c.StopMethod {
	case StopShutdown, StopStop, StopSuspend:
	default:
		return fmt.Errorf("stop_method %q must be shutdown, stop or suspend", c.StopMethod)
	}
	switch c.Probe {
	case ProbeTCP, ProbeNone:
	case ProbeHTTP:
		if !strings.HasPrefix(c.ProbePath, "/") {
			return fmt.Errorf("probe http path %q must start with /", c.ProbePath)
		}
	case ProbeUDP:
		if c.ProbePath == "" {
			return errors.New("probe udp needs the datagram to send, which the service answers when ready")
		}
	default:
		return fmt.Errorf("probe %q must be tcp, http, udp or none", c.Probe)
	}
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("port %d out of range", c.Port)
	}
	if c.IdleTimeout < 0 || c.WakeTimeout <= 0 || c.StopTimeout <= 0 || c.ReadyAfter < 0 {
		return errors.New("durations must not be negative (wake_timeout and stop_timeout positive)")
	}
	if c.ProbeInterval < 10*time.Millisecond || c.TaskPollInterval < 10*time.Millisecond {
		return errors.New("probe_interval and task_poll_interval must be at least 10ms")
	}
	if c.Address != "" {
		if strings.ContainsAny(c.Address, "/ ") {
			return fmt.Errorf("address %q must be a host or IP, without port or path", c.Address)
		}
		if _, _, err := net.SplitHostPort(c.Address); err == nil {
			return fmt.Errorf("address %q must not carry a port: use port", c.Address)
		}
	}
	for _, d := range c.DependsOn {
		if err := ValidateRef(d); err != nil {
			return fmt.Errorf("depends_on: %w", err)
		}
	}
	return c.validateActivity()
}

// ValidateRef checks a guest reference: a vmid or a name.
func ValidateRef(ref string) error {
	if ref == "" || strings.ContainsAny(ref, "/ \t") {
		return fmt.Errorf("guest %q must be a vmid or a name", ref)
	}
	if n, err := strconv.Atoi(ref); err == nil && (n < 100 || n > 999999999) {
		return fmt.Errorf("vmid %d out of range 100-999999999", n)
	}
	return nil
}
