package lxc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	proxmox "github.com/luthermonson/go-proxmox"
)

// apiBase appends /api2/json to a cluster URL unless it is there.
func apiBase(u string) string {
	u = strings.TrimRight(u, "/")
	if strings.HasSuffix(u, "/api2/json") {
		return u
	}
	return u + "/api2/json"
}

// newClient builds a go-proxmox client for urls. It makes no request.
func newClient(cfg ClusterConfig, urls []string, tokenID, secret string) (*proxmox.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	opts := []proxmox.Option{
		proxmox.WithHTTPClient(&http.Client{Transport: tr}),
		proxmox.WithAPIToken(tokenID, secret),
		proxmox.WithTimeout(cfg.RequestTimeout),
		proxmox.WithUserAgent("caddy-proxmox"),
	}
	if cfg.TLSInsecureSkipVerify {
		opts = append(opts, proxmox.WithInsecureSkipVerify())
	}
	if len(cfg.TLSTrustedCACerts) > 0 {
		pool := x509.NewCertPool()
		for _, f := range cfg.TLSTrustedCACerts {
			pem, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("reading tls_trusted_ca_certs: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tls_trusted_ca_certs %s: no PEM certificate", f)
			}
		}
		opts = append(opts, proxmox.WithRootCAs(pool))
	}
	if len(urls) > 1 {
		extra := make([]string, 0, len(urls)-1)
		for _, u := range urls[1:] {
			extra = append(extra, apiBase(u))
		}
		opts = append(opts, proxmox.WithAdditionalEndpoints(extra...))
	}
	return proxmox.NewClient(apiBase(urls[0]), opts...), nil
}

// target is a guest as the API addresses it.
type target struct {
	node string
	kind string // lxc | qemu
	vmid int
}

func (t target) path(suffix string) string {
	return fmt.Sprintf("/nodes/%s/%s/%d/%s", t.node, t.kind, t.vmid, suffix)
}

// guestStatus is the part of status/current a wake and a stop need.
type guestStatus struct {
	Status    string   `json:"status"`
	QMPStatus string   `json:"qmpstatus"`
	Lock      string   `json:"lock"`
	Template  pveBool  `json:"template"`
	HA        haStatus `json:"ha"`
}

// haStatus is status/current's "ha": whether pve-ha-manager manages the
// guest (an ignored resource is not managed) and its service state.
type haStatus struct {
	Managed pveBool `json:"managed"`
	State   string  `json:"state"`
}

// paused reports whether QEMU runs without running the guest: suspended
// to RAM, in S3 (suspended) or started paused for a backup (prelaunch),
// the states PVE's vm_is_paused knows. A resume starts it.
func (s guestStatus) paused() bool {
	switch s.QMPStatus {
	case "paused", "prelaunch", "suspended":
		return s.Status == "running"
	}
	return false
}

// obs is the part of a status that, when it changes, ends a failed
// wake's back-off.
func (s guestStatus) obs() string {
	return obsKey(s.Status, s.Lock, s.haState())
}

// haState is the HA service state of a managed guest, else "".
func (s guestStatus) haState() string {
	if !s.HA.Managed {
		return ""
	}
	return s.HA.State
}

func obsKey(status, lock, hastate string) string {
	return status + "|" + lock + "|" + hastate
}

// pveBool reads PVE's booleans, which come as 0/1, "0"/"1" or true/false.
type pveBool bool

func (b *pveBool) UnmarshalJSON(data []byte) error {
	switch strings.Trim(string(data), `"`) {
	case "1", "true":
		*b = true
	default:
		*b = false
	}
	return nil
}

// status reads status/current.
func status(ctx context.Context, c *proxmox.Client, t target) (guestStatus, error) {
	var st guestStatus
	err := c.Get(ctx, t.path("status/current"), &st)
	return st, err
}

// power posts a power action and returns its task. Start, stop, suspend
// and resume go through go-proxmox's typed handles; shutdown is posted
// directly because the VM handle has no timeout/forceStop parameters.
func power(ctx context.Context, c *proxmox.Client, t target, action string, stopTimeout time.Duration) (*proxmox.Task, error) {
	node := c.NodeRef(t.node)
	if action == "shutdown" {
		var upid proxmox.UPID
		params := map[string]any{"forceStop": true, "timeout": int((stopTimeout + time.Second - 1) / time.Second)}
		if err := c.Post(ctx, t.path("status/shutdown"), params, &upid); err != nil {
			return nil, err
		}
		return proxmox.NewTask(upid, c), nil
	}
	if t.kind == "qemu" {
		vm := node.VirtualMachineRef(t.vmid)
		switch action {
		case "start":
			return vm.Start(ctx)
		case "stop":
			return vm.Stop(ctx)
		case "suspend":
			return vm.Pause(ctx)
		case "resume":
			return vm.Resume(ctx)
		}
	} else {
		ct := node.ContainerRef(t.vmid)
		switch action {
		case "start":
			return ct.Start(ctx)
		case "stop":
			return ct.Stop(ctx)
		case "suspend":
			return ct.Suspend(ctx)
		case "resume":
			return ct.Resume(ctx)
		}
	}
	return nil, fmt.Errorf("unknown power action %q", action)
}

// runTask posts an action and waits for its task to end successfully.
// The task is returned even on failure, for its UPID.
func runTask(ctx context.Context, c *proxmox.Client, t target, action string, interval, stopTimeout time.Duration) (*proxmox.Task, error) {
	task, err := power(ctx, c, t, action, stopTimeout)
	if err != nil {
		return nil, fmt.Errorf("%s request: %w", action, err)
	}
	if task == nil {
		return nil, fmt.Errorf("%s request: no task id in the answer", action)
	}
	max := time.Hour
	if dl, ok := ctx.Deadline(); ok {
		max = time.Until(dl)
	}
	if err := task.Wait(ctx, interval, max); err != nil {
		var tfe *proxmox.TaskFailedError
		if errors.As(err, &tfe) {
			return task, fmt.Errorf("%s task failed: %s", action, tfe.ExitStatus)
		}
		return task, fmt.Errorf("waiting for the %s task: %w", action, err)
	}
	return task, nil
}
