package wake

import (
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/certmagic"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// Share makes several Caddy instances in front of the same guests act as
// one, through Caddy's storage (the storage global option: what a Caddy
// cluster already shares for its certificates):
//
//	proxmox {
//		share {
//			interval 10s
//		}
//		cluster ...
//	}
//
// No instance stops a guest another has served within idle_timeout, and
// one start serves all: only the instance holding the guest's storage
// lock posts it, the others wait on it. Each instance writes a guest's
// activity at most once per interval (and every interval while requests
// or streams are open); the others read it only before an idle stop, so
// an idle stop may come up to one interval later than idle_timeout. The
// instances must name the clusters alike.
type Share struct {
	// Interval is how often at most an instance writes a guest's activity
	// to the storage (10s).
	Interval caddy.Duration `json:"interval,omitempty"`
}

// validate checks the settings.
func (s *Share) validate() error {
	if s != nil && s.Interval < 0 {
		return errors.New("proxmox: share interval must not be negative")
	}
	return nil
}

// runtime is the lxc setting for storage (nil when not sharing).
func (s *Share) runtime(storage certmagic.Storage) *lxc.Share {
	if s == nil || storage == nil {
		return nil
	}
	return &lxc.Share{Storage: storage, Interval: time.Duration(s.Interval)}
}

// unmarshalShare reads "share [{ interval <duration> }]".
func unmarshalShare(d *caddyfile.Dispenser) (*Share, error) {
	s := new(Share)
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "interval":
			dur, err := durationArg(d)
			if err != nil {
				return nil, err
			}
			s.Interval = caddy.Duration(dur)
		default:
			return nil, d.Errf("unknown share option '%s'", d.Val())
		}
	}
	return s, nil
}
