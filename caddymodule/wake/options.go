package wake

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// GuestOptions are how a guest is woken, checked and put to sleep: the
// options every proxmox_wake handler has, the HTTP one and layer4's
// (package caddymodule/wakel4), which embed them. One parser
// (UnmarshalOption) and one validation (GuestConfig) serve both, so that
// an option means the same everywhere.
type GuestOptions struct {
	// IdleTimeout before an idle guest is stopped (15m); 0 never stops.
	IdleTimeout *caddy.Duration `json:"idle_timeout,omitempty"`
	// WakeTimeout bounds a wake from start to ready (2m).
	WakeTimeout caddy.Duration `json:"wake_timeout,omitempty"`
	// HoldTimeout bounds how long one request or connection is held
	// while the guest wakes: an HTTP request 60s by default, a layer4
	// connection the whole wake; never much longer than wake_timeout.
	HoldTimeout caddy.Duration `json:"hold_timeout,omitempty"`
	// StopMethod is shutdown (graceful, forced after stop_timeout), stop
	// or suspend.
	StopMethod string `json:"stop_method,omitempty"`
	// StopTimeout is the graceful shutdown time before forcing (1m).
	StopTimeout caddy.Duration `json:"stop_timeout,omitempty"`
	// Address is the guest's host when it cannot be discovered
	// (discovery: LXC config MAC matched on /interfaces, QEMU guest agent).
	Address string `json:"address,omitempty"`
	// Port is the guest's service port, probed and proxied to (HTTP: 80;
	// layer4: required).
	Port int `json:"port,omitempty"`
	// Probe is tcp (default: Port accepts a connection), http (HTTP
	// handler only), udp (layer4 only: ProbeSend is answered) or none
	// (ready once running; with ready_after for a UDP service that
	// answers nothing).
	Probe string `json:"probe,omitempty"`
	// ProbePath is the path of the http probe, which expects a 2xx or 3xx.
	ProbePath string `json:"probe_path,omitempty"`
	// ProbeSend is the datagram the udp probe sends, in hex: a query the
	// service answers once ready (a game server's status query, a DNS
	// question). Any answer within a second means ready.
	ProbeSend string `json:"probe_send,omitempty"`
	// ProbeInterval is the period of readiness probes (100ms) once the
	// service has been probed for 10 s; before that they run every 5ms, so
	// that a held request goes through as soon as the service answers.
	ProbeInterval caddy.Duration `json:"probe_interval,omitempty"`
	// ReadyAfter is a settle delay after the probe first passes.
	ReadyAfter caddy.Duration `json:"ready_after,omitempty"`
	// RetryBackoff is the wait after a failed wake (10s, doubling up to
	// MaxBackoff); meanwhile requests get 503 with the reason and
	// layer4 connections are closed at once.
	RetryBackoff caddy.Duration `json:"retry_backoff,omitempty"`
	// MaxBackoff caps the doubled RetryBackoff (5m).
	MaxBackoff caddy.Duration `json:"max_backoff,omitempty"`
	// TaskPollInterval is the period of task and status checks (200ms).
	TaskPollInterval caddy.Duration `json:"task_poll_interval,omitempty"`
	// MaxPending caps the requests or connections held for this guest;
	// beyond it a request gets 503 and a connection is closed (0: no
	// cap).
	MaxPending int `json:"max_pending,omitempty"`
	// KeepWarm windows ("Mon-Fri 08:00-18:00") keep the guest from
	// idling out, and start it when they open.
	KeepWarm []string `json:"keep_warm,omitempty"`
	// TimeZone is the IANA time zone of the keep_warm windows ("Europe/
	// Paris"); the process's local time by default.
	TimeZone string `json:"time_zone,omitempty"`
	// DependsOn are guests of the same cluster woken first (in parallel)
	// and kept up while this one is.
	DependsOn []string `json:"depends_on,omitempty"`
	// LeaveExternal never stops a guest someone else started.
	LeaveExternal bool `json:"leave_external,omitempty"`
	// BusyIf rules count a guest busy with work that does not pass
	// through Caddy (a transcode, a download, SSH, SMB) as active, from
	// its CPU, network and disk rates in the cluster poll.
	BusyIf []*BusyIf `json:"busy_if,omitempty"`
	// PreStopCheck is a URL asked before an idle stop: a 2xx lets the
	// stop go ahead; any other answer (redirects are not followed), an
	// error or no answer within PreStopTimeout means busy, and it is
	// asked again later (after idle_timeout, at most a minute). It may
	// contain {guest.address} (the guest's address, bracketed if IPv6),
	// {guest.port}, {guest.vmid}, {guest.node} and {guest.name}.
	PreStopCheck string `json:"pre_stop_check,omitempty"`
	// PreStopTimeout bounds one pre_stop_check request (5s).
	PreStopTimeout caddy.Duration `json:"pre_stop_timeout,omitempty"`
	// StreamIdleTimeout ends a silent stream's claim to activity: a
	// websocket, an event stream or a layer4 connection that carried no
	// bytes (either way) for this long no longer keeps the guest up, and
	// the guest idles out idle_timeout after its last byte. 0: open
	// streams and connections always count.
	StreamIdleTimeout caddy.Duration `json:"stream_idle_timeout,omitempty"`
}

// GuestConfig is the guest config these options make, with defaults,
// validated.
func (o GuestOptions) GuestConfig() (lxc.GuestConfig, error) {
	cfg := lxc.GuestConfig{
		IdleTimeout:       lxc.DefaultIdleTimeout,
		WakeTimeout:       time.Duration(o.WakeTimeout),
		StopMethod:        o.StopMethod,
		StopTimeout:       time.Duration(o.StopTimeout),
		Address:           o.Address,
		Port:              o.Port,
		Probe:             o.Probe,
		ProbePath:         o.ProbePath,
		ProbeInterval:     time.Duration(o.ProbeInterval),
		ReadyAfter:        time.Duration(o.ReadyAfter),
		RetryBackoff:      time.Duration(o.RetryBackoff),
		MaxBackoff:        time.Duration(o.MaxBackoff),
		TaskPollInterval:  time.Duration(o.TaskPollInterval),
		DependsOn:         o.DependsOn,
		LeaveExternal:     o.LeaveExternal,
		PreStopCheck:      o.PreStopCheck,
		PreStopTimeout:    time.Duration(o.PreStopTimeout),
		StreamIdleTimeout: time.Duration(o.StreamIdleTimeout),
	}
	if o.IdleTimeout != nil {
		cfg.IdleTimeout = time.Duration(*o.IdleTimeout)
	}
	if o.MaxPending < 0 || o.HoldTimeout < 0 {
		return cfg, errors.New("max_pending and hold_timeout must not be negative")
	}
	if o.ProbeSend != "" || o.Probe == lxc.ProbeUDP {
		if o.Probe != lxc.ProbeUDP || o.ProbePath != "" {
			return cfg, errors.New("probe_send is the udp probe's datagram, and the udp probe takes no path")
		}
		b, err := hex.DecodeString(o.ProbeSend)
		if err != nil {
			return cfg, fmt.Errorf("probe_send: want the datagram in hex: %w", err)
		}
		cfg.ProbePath = string(b)
	}
	for _, b := range o.BusyIf {
		if b != nil {
			cfg.BusyIf = append(cfg.BusyIf, b.rule())
		}
	}
	for _, s := range o.KeepWarm {
		w, err := lxc.ParseWindow(s)
		if err != nil {
			return cfg, err
		}
		cfg.KeepWarm = append(cfg.KeepWarm, w)
	}
	loc, err := loadTimeZone(o.TimeZone)
	if err != nil {
		return cfg, err
	}
	cfg.TimeZone = loc
	cfg = cfg.WithDefaults()
	return cfg, cfg.Validate()
}

// UnmarshalOption reads the option opt (the dispenser's current token) of
// a handler's block, if it is one of the GuestOptions; known is false for
// any other option, with nothing consumed.
//
//	idle_timeout <duration>          # 15m; 0 never stops
//	wake_timeout <duration>          # 2m
//	hold_timeout <duration>
//	stop_method shutdown|stop|suspend
//	stop_timeout <duration>          # 1m, graceful shutdown before forcing
//	address <host>                   # skip discovery
//	port <port>
//	probe tcp | http [<path>] | udp <hex datagram> | none
//	probe_interval <duration>        # 100ms
//	ready_after <duration>
//	retry_backoff <duration> [<max>] # 10s 5m
//	task_poll_interval <duration>    # 200ms
//	max_pending <n>
//	keep_warm [<days>] <HH:MM-HH:MM> # repeatable; starts the guest when it opens
//	time_zone <IANA name>            # of keep_warm; local time by default
//	depends_on <guest>...
//	leave_external
//	busy_if <metric> > <value>... [for <window>]  # repeatable; see lxc.ParseBusyIf
//	pre_stop_check <url> [<timeout>] # 2xx = may stop
//	stream_idle_timeout <duration>   # silent streams stop counting
func (o *GuestOptions) UnmarshalOption(d *caddyfile.Dispenser, opt string) (known bool, err error) {
	switch opt {
	case "wake_timeout", "hold_timeout", "stop_timeout", "probe_interval", "ready_after", "task_poll_interval", "stream_idle_timeout":
		dur, err := durationArg(d)
		*o.durations()[opt] = caddy.Duration(dur)
		return true, err
	case "stop_method", "address", "time_zone":
		p := o.words()[opt]
		return true, oneArg(d, func(v string) error { *p = v; return nil })
	case "idle_timeout":
		dur, err := durationArg(d)
		cd := caddy.Duration(dur)
		o.IdleTimeout = &cd
		return true, err
	case "port":
		return true, oneArg(d, func(v string) error {
			p, err := strconv.Atoi(v)
			if err != nil || p < 1 || p > 65535 {
				return d.Errf("port: want 1-65535, not '%s'", v)
			}
			o.Port = p
			return nil
		})
	case "max_pending":
		return true, oneArg(d, func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return d.Errf("max_pending: want a count, not '%s'", v)
			}
			o.MaxPending = n
			return nil
		})
	case "retry_backoff":
		return true, o.unmarshalBackoff(d)
	case "probe":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return true, d.ArgErr()
		}
		o.Probe = args[0]
		switch {
		case len(args) == 1 && o.Probe == lxc.ProbeUDP:
			return true, d.Errf("probe udp needs the datagram to send, in hex: a query the service answers")
		case len(args) == 1:
		case o.Probe == lxc.ProbeHTTP:
			o.ProbePath = args[1]
		case o.Probe == lxc.ProbeUDP:
			if _, err := hex.DecodeString(args[1]); err != nil {
				return true, d.Errf("probe udp: want the datagram in hex, not '%s'", args[1])
			}
			o.ProbeSend = args[1]
		default:
			return true, d.Errf("only the http probe takes a path, and the udp probe a datagram")
		}
	case "keep_warm", "depends_on", "busy_if":
		args := d.RemainingArgs()
		if len(args) == 0 {
			return true, d.ArgErr()
		}
		return true, o.appendList(d, opt, args)
	case "leave_external":
		if d.NextArg() {
			return true, d.ArgErr()
		}
		o.LeaveExternal = true
	case "pre_stop_check":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 {
			return true, d.ArgErr()
		}
		o.PreStopCheck = args[0]
		if len(args) == 2 {
			dur, err := caddy.ParseDuration(args[1])
			if err != nil {
				return true, d.Errf("bad duration '%s': %v", args[1], err)
			}
			o.PreStopTimeout = caddy.Duration(dur)
		}
	default:
		return false, nil
	}
	return true, nil
}

// durations are the options that take one duration.
func (o *GuestOptions) durations() map[string]*caddy.Duration {
	return map[string]*caddy.Duration{
		"wake_timeout": &o.WakeTimeout, "hold_timeout": &o.HoldTimeout, "stop_timeout": &o.StopTimeout,
		"probe_interval": &o.ProbeInterval, "ready_after": &o.ReadyAfter, "task_poll_interval": &o.TaskPollInterval,
		"stream_idle_timeout": &o.StreamIdleTimeout,
	}
}

// words are the options that take one word.
func (o *GuestOptions) words() map[string]*string {
	return map[string]*string{"stop_method": &o.StopMethod, "address": &o.Address, "time_zone": &o.TimeZone}
}

// unmarshalBackoff reads "retry_backoff <duration> [<max>]".
func (o *GuestOptions) unmarshalBackoff(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	for i, a := range args {
		dur, err := caddy.ParseDuration(a)
		if err != nil {
			return d.Errf("bad duration '%s': %v", a, err)
		}
		if i == 0 {
			o.RetryBackoff = caddy.Duration(dur)
		} else {
			o.MaxBackoff = caddy.Duration(dur)
		}
	}
	return nil
}

// appendList reads the repeatable options with several words.
func (o *GuestOptions) appendList(d *caddyfile.Dispenser, opt string, args []string) error {
	switch opt {
	case "keep_warm":
		o.KeepWarm = append(o.KeepWarm, strings.Join(args, " "))
	case "depends_on":
		o.DependsOn = append(o.DependsOn, args...)
	default: // busy_if
		r, err := lxc.ParseBusyIf(strings.Join(args, " "))
		if err != nil {
			return d.Err(err.Error())
		}
		o.BusyIf = append(o.BusyIf, busyIfOf(r))
	}
	return nil
}

// oneArg reads exactly one argument and hands it to set.
func oneArg(d *caddyfile.Dispenser, set func(string) error) error {
	if !d.NextArg() {
		return d.ArgErr()
	}
	if err := set(d.Val()); err != nil {
		return err
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}
