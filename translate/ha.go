package translate

import (
	"crypto/sha1" //nolint:gosec // PVE's config digest is SHA-1
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// PVE's HA stack (pve-ha-manager) keeps a VM in a requested state: started
// (restarted when it stops, recovered when its node fails), stopped,
// disabled (stopped, not recovered) or ignored (left alone). KubeVirt's run
// strategies are the same idea: a VM that is an HA resource gets the run
// strategy of its requested state (HARunStrategy), and the resource's
// config lives on the VM (AnnotationHA), so it goes with the VM.

// AnnotationHA holds a VM's HA resource config (JSON, HAConfig): the VM is
// an HA resource while it is set.
const AnnotationHA = "pve.caddy-proxmox.io/ha"

// HA resource states (pve-ha-manager's state enum; enabled is an alias of
// started).
const (
	HAStarted  = "started"
	HAStopped  = "stopped"
	HAEnabled  = "enabled"
	HADisabled = "disabled"
	HAIgnored  = "ignored"
)

// HAConfig is an HA resource's config as PVE keeps it: only the keys that
// were set (PVE prints defaults nowhere).
type HAConfig struct {
	State       string `json:"state,omitempty"`
	Group       string `json:"group,omitempty"`
	MaxRestart  *int   `json:"max_restart,omitempty"`
	MaxRelocate *int   `json:"max_relocate,omitempty"`
	Comment     string `json:"comment,omitempty"`
}

// HAConfigOf is a VM's HA resource config; ok is false when the VM is no HA
// resource (or the annotation is unreadable).
func HAConfigOf(vm *kubevirtv1.VirtualMachine) (HAConfig, bool) {
	var c HAConfig
	raw, ok := vm.Annotations[AnnotationHA]
	if !ok || json.Unmarshal([]byte(raw), &c) != nil {
		return HAConfig{}, false
	}
	return c, true
}

// Encode is the annotation's value.
func (c HAConfig) Encode() string {
	b, _ := json.Marshal(c)
	return string(b)
}

// Requested is the state the HA stack keeps the VM in: started unless set,
// enabled read as started.
func (c HAConfig) Requested() string {
	switch c.State {
	case "", HAEnabled:
		return HAStarted
	}
	return c.State
}

// Managed tells whether the HA stack acts on the VM: every state but
// ignored (pve-ha-manager's vm_is_ha_managed).
func (c HAConfig) Managed() bool { return c.Requested() != HAIgnored }

// HARunStrategy is the run strategy of a VM that is an HA resource in
// state: Always keeps a started one running (KubeVirt starts it again
// after a crash or a shutdown from inside the guest, as PVE's CRM does),
// Halted keeps a stopped or disabled one stopped, and an ignored one runs
// as a VM without HA (Manual: started and stopped by request only).
func HARunStrategy(state string) kubevirtv1.VirtualMachineRunStrategy {
	switch (HAConfig{State: state}).Requested() {
	case HAStarted:
		return kubevirtv1.RunStrategyAlways
	case HAStopped, HADisabled:
		return kubevirtv1.RunStrategyHalted
	}
	return kubevirtv1.RunStrategyManual
}

// HAVerboseState is pve-ha-manager's verbose service state of a resource
// (get_verbose_service_state): what status/current shows.
func HAVerboseState(c HAConfig, running bool) string {
	switch req := c.Requested(); {
	case req == HAIgnored:
		return HAIgnored
	case req == HAStarted && running:
		return HAStarted
	case req == HAStarted:
		return "starting"
	case running:
		return "stopping"
	case req == HADisabled:
		return HADisabled
	}
	return HAStopped
}

// HACRMState is the service state the HA manager reports for a resource
// (hastate in /cluster/resources, ha.state in status/current): started
// while it is to run, stopped otherwise.
func HACRMState(c HAConfig) string {
	switch c.Requested() {
	case HAStarted:
		return HAStarted
	case HAIgnored:
		return HAIgnored
	}
	return HAStopped
}

// sidRE is an HA service id: vm:<vmid> (ct:<vmid> has no VM here);
// haVMIDRE is PVEVM's verify_name.
var (
	sidRE    = regexp.MustCompile(`^(\S+):(\S+)$`)
	haVMIDRE = regexp.MustCompile(`^[1-9][0-9]+$`)
)

// ParseSID reads an HA service id as pve-ha-manager's parse_sid does:
// "vm:<vmid>", "ct:<vmid>", or a bare vmid. typ is "vm" or "ct".
func ParseSID(sid string) (typ string, vmid int, err error) {
	if n, e := strconv.Atoi(sid); e == nil && sid == strconv.Itoa(n) {
		return "vm", n, nil
	}
	m := sidRE.FindStringSubmatch(sid)
	if m == nil {
		return "", 0, fmt.Errorf("unable to parse service id '%s'", sid)
	}
	if m[1] != "vm" && m[1] != "ct" {
		return "", 0, fmt.Errorf("no such resource type '%s'", m[1])
	}
	if !haVMIDRE.MatchString(m[2]) {
		return "", 0, fmt.Errorf("invalid VMID")
	}
	id, e := strconv.Atoi(m[2])
	if e != nil {
		return "", 0, fmt.Errorf("invalid VMID")
	}
	return m[1], id, nil
}

// HADigest is the digest of a set of HA resource configs (PVE's digest of
// resources.cfg), by service id.
func HADigest(configs map[string]HAConfig) string {
	sids := make([]string, 0, len(configs))
	for s := range configs {
		sids = append(sids, s)
	}
	sort.Strings(sids)
	h := sha1.New() //nolint:gosec // a digest, as PVE's
	for _, s := range sids {
		fmt.Fprintf(h, "%s\n%s\n", s, configs[s].Encode())
	}
	return hex.EncodeToString(h.Sum(nil))
}
