package api

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// HA resources (/cluster/ha/resources) are VMs whose run strategy the HA
// state sets (translate.HARunStrategy), their config an annotation of the
// VM (translate.AnnotationHA). There are no HA groups here (KubeVirt
// places instances by its scheduler), so groups are listed as missing, as
// PVE lists a resource whose group is gone.

// haGroupRE is pve-ha-group-id (a pve-configid).
var haGroupRE = regexp.MustCompile(`^(?i:[a-z][a-z0-9_-]*)$`)

// haKeys are the keys of an HA resource's config.
var haKeys = []string{"state", "group", "max_restart", "max_relocate", "comment"}

// haRow is an HA resource as PVE's API prints it.
func haRow(sid string, c translate.HAConfig, digest string) map[string]any {
	row := map[string]any{"sid": sid, "type": "vm", "digest": digest}
	if c.State != "" {
		row["state"] = c.State
	}
	if c.Group != "" {
		row["group"] = c.Group
		row["errors"] = map[string]string{"group": fmt.Sprintf("group '%s' does not exist", c.Group)}
	}
	if c.MaxRestart != nil {
		row["max_restart"] = *c.MaxRestart
	}
	if c.MaxRelocate != nil {
		row["max_relocate"] = *c.MaxRelocate
	}
	if c.Comment != "" {
		row["comment"] = c.Comment
	}
	return row
}

func sidOf(vmid int) string { return "vm:" + strconv.Itoa(vmid) }

// haConfigs are the HA resources' configs by service id, and their digest.
func haConfigs(q *request) (map[string]translate.HAConfig, string) {
	all := map[string]translate.HAConfig{}
	for _, r := range q.c.HAResources() {
		all[sidOf(r.VMID)] = r.Config
	}
	return all, translate.HADigest(all)
}

// getHAResources lists the HA resources the caller may see.
func (h *APIHandler) getHAResources(q *request) (any, *apiError) {
	if e := q.p.allowOnly("type"); e != nil {
		return nil, e
	}
	if t, ok := q.p["type"]; ok && t != "vm" && t != "ct" {
		return nil, paramErr("type", "value '%s' does not have a value in the enumeration 'ct, vm'", t)
	}
	_, digest := haConfigs(q)
	out := []map[string]any{}
	if q.p["type"] == "ct" {
		return out, nil
	}
	for _, g := range h.visibleGuests(q) {
		if c, ok := translate.HAConfigOf(g.Meta()); ok {
			out = append(out, haRow(sidOf(g.VMID), c, digest))
		}
	}
	return out, nil
}

// haGuest finds the VM of a service id (the path's sid, or a parameter):
// PVE's parse_sid, then the resource's existence.
func (h *APIHandler) haGuest(q *request, sid string) (kube.Guest, string, *apiError) {
	typ, vmid, err := translate.ParseSID(sid)
	if err != nil {
		return kube.Guest{}, "", newError(http.StatusInternalServerError, "%v", err)
	}
	full := typ + ":" + strconv.Itoa(vmid)
	g, gerr := q.c.Guest(vmid)
	if typ == "ct" || gerr != nil {
		if !strings.Contains(sid, ":") {
			return kube.Guest{}, full, newError(http.StatusInternalServerError, "unable do detect SID from VMID - VM/CT %d does not exist", vmid)
		}
		return kube.Guest{}, full, newError(http.StatusInternalServerError, "resource '%s' does not exist in cluster", full)
	}
	return g, full, nil
}

// getHAResource reads one HA resource. A VM that is none is PVE's "no
// such resource", which Telmate's update path expects.
func (h *APIHandler) getHAResource(q *request) (any, *apiError) {
	g, sid, e := h.haGuest(q, q.pathValue("sid"))
	if e != nil {
		if sid != "" && strings.HasPrefix(e.Message, "resource '") {
			return nil, newError(http.StatusInternalServerError, "no such resource '%s'", sid)
		}
		return nil, e
	}
	c, ok := translate.HAConfigOf(g.Meta())
	if !ok {
		return nil, newError(http.StatusInternalServerError, "no such resource '%s'", sid)
	}
	_, digest := haConfigs(q)
	return haRow(sid, c, digest), nil
}

// haParams reads the config keys of a create or update into c, as
// pve-ha-manager's schema checks them.
func haParams(p params, c *translate.HAConfig) *apiError {
	errs := map[string]string{}
	if s, ok := p["state"]; ok {
		if !oneOf(s, "started", "stopped", "enabled", "disabled", "ignored") {
			errs["state"] = fmt.Sprintf("value '%s' does not have a value in the enumeration 'started, stopped, enabled, disabled, ignored'", s)
		}
		c.State = s
	}
	if g, ok := p["group"]; ok {
		if !haGroupRE.MatchString(g) {
			errs["group"] = "invalid format - invalid configuration ID '" + g + "'"
		}
		c.Group = g
	}
	for _, k := range []string{"max_restart", "max_relocate"} {
		if _, ok := p[k]; !ok {
			continue
		}
		n, e := p.integer(k, 0, 0, 1<<31-1)
		if e != nil {
			errs[k] = e.Errors[k]
			continue
		}
		v := int(n)
		if k == "max_restart" {
			c.MaxRestart = &v
		} else {
			c.MaxRelocate = &v
		}
	}
	if cm, ok := p["comment"]; ok {
		if len(cm) > 4096 {
			errs["comment"] = "value may only be 4096 characters long"
		}
		c.Comment = cm
	}
	if len(errs) > 0 {
		return paramError(errs)
	}
	return nil
}

// postHAResource makes a VM an HA resource (pve-ha-manager's create).
func (h *APIHandler) postHAResource(q *request) (any, *apiError) {
	if e := q.p.allowOnly("sid", "type", "state", "group", "max_restart", "max_relocate", "comment"); e != nil {
		return nil, e
	}
	sid, ok := q.p["sid"]
	if !ok {
		return nil, paramErr("sid", "property is missing and it is not optional")
	}
	var c translate.HAConfig
	if e := haParams(q.p, &c); e != nil {
		return nil, e
	}
	g, full, e := h.haGuest(q, sid)
	if e != nil {
		return nil, e
	}
	if t, ok := q.p["type"]; ok && t != "vm" {
		return nil, newError(http.StatusInternalServerError, "types does not match")
	}
	if _, ok := translate.HAConfigOf(g.Meta()); ok {
		return nil, newError(http.StatusInternalServerError, "resource ID '%s' already defined", full)
	}
	if g.Template() {
		return nil, newError(http.StatusInternalServerError, "unable to add %s to HA: it is a template (templates do not run)", full)
	}
	return nil, h.writeHA(q, g, &c)
}

// putHAResource changes an HA resource's config (update_resources_config):
// the keys given, those in delete removed, guarded by digest.
func (h *APIHandler) putHAResource(q *request) (any, *apiError) {
	if e := q.p.allowOnly("type", "state", "group", "max_restart", "max_relocate", "comment", "delete", "digest"); e != nil {
		return nil, e
	}
	g, full, e := h.haGuest(q, q.pathValue("sid"))
	if e != nil {
		return nil, e
	}
	if t, ok := q.p["type"]; ok && t != "vm" {
		return nil, newError(http.StatusInternalServerError, "types does not match")
	}
	c, ok := translate.HAConfigOf(g.Meta())
	if !ok {
		return nil, newError(http.StatusInternalServerError, "no such resource '%s'", full)
	}
	if err := haDelete(q.p["delete"], &c); err != nil {
		return nil, err
	}
	if e := haParams(q.p, &c); e != nil {
		return nil, e
	}
	if grp := q.p["group"]; grp != "" {
		return nil, newError(http.StatusInternalServerError, "HA group '%s' does not exist", grp)
	}
	if d := q.p["digest"]; d != "" {
		if _, digest := haConfigs(q); d != digest {
			return nil, newError(http.StatusInternalServerError, "%v", kube.ErrModified)
		}
	}
	return nil, h.writeHA(q, g, &c)
}

// haDelete removes the keys of delete= from c.
func haDelete(list string, c *translate.HAConfig) *apiError {
	for _, k := range splitKeyList(list) {
		switch k {
		case "state":
			c.State = ""
		case "group":
			c.Group = ""
		case "max_restart":
			c.MaxRestart = nil
		case "max_relocate":
			c.MaxRelocate = nil
		case "comment":
			c.Comment = ""
		default:
			return paramErr("delete", "invalid format - invalid configuration ID '%s'", k)
		}
	}
	return nil
}

// deleteHAResource ends a VM's HA management; it keeps running or stopped
// as it is, started and stopped by request again (run strategy Manual).
func (h *APIHandler) deleteHAResource(q *request) (any, *apiError) {
	g, full, e := h.haGuest(q, q.pathValue("sid"))
	if e != nil {
		return nil, e
	}
	if _, ok := translate.HAConfigOf(g.Meta()); !ok {
		return nil, newError(http.StatusInternalServerError, "cannot delete service '%s', not HA managed!", full)
	}
	return nil, h.writeHA(q, g, nil)
}

// writeHA writes a VM's HA config (nil: none), re-read and tried again
// while KubeVirt changes the VM.
func (h *APIHandler) writeHA(q *request, g kube.Guest, c *translate.HAConfig) *apiError {
	for attempt := 0; ; attempt++ {
		_, err := q.c.SetHA(q.ctx(), g, c)
		if err == nil {
			return nil
		}
		if !errors.Is(err, kube.ErrModified) || attempt == 4 {
			return kubeError(err)
		}
		fresh, rerr := q.c.Refresh(q.ctx(), g)
		if rerr != nil {
			return kubeError(rerr)
		}
		g = fresh
	}
}

// haStatus is the ha object of status/current (get_service_status).
func haStatus(g kube.Guest) map[string]any {
	c, ok := translate.HAConfigOf(g.Meta())
	if !ok || !c.Managed() {
		return map[string]any{"managed": 0}
	}
	out := map[string]any{"managed": 1, "state": translate.HACRMState(c)}
	if c.Group != "" {
		out["group"] = c.Group
	}
	return out
}

// haState is a VM's hastate in /cluster/resources, "" when it is no HA
// resource.
func haState(g kube.Guest) string {
	if c, ok := translate.HAConfigOf(g.Meta()); ok {
		return translate.HACRMState(c)
	}
	return ""
}

// getHAStatus is /cluster/ha/status/current: the quorum, and while any VM
// is an HA resource the manager, each node's local resource manager and
// each resource, as pve-ha-manager reports them.
func (h *APIHandler) getHAStatus(q *request) (any, *apiError) {
	nodes := h.nodes()
	first := "localhost"
	if len(nodes) > 0 {
		first = nodes[0].Name
	}
	out := []map[string]any{{"id": "quorum", "type": "quorum", "node": first, "status": "OK", "quorate": 1}}
	resources := q.c.HAResources()
	if len(resources) == 0 {
		return out, nil
	}
	now := time.Now()
	stamp := now.Format("Mon Jan _2 15:04:05 2006")
	out = append(out, map[string]any{"id": "master", "type": "master", "node": first,
		"status": fmt.Sprintf("%s (active, %s)", first, stamp), "timestamp": now.Unix()})
	active := map[string]bool{}
	for _, r := range resources {
		if r.State().Running() {
			active[r.Node] = true
		}
	}
	for _, n := range nodes {
		st := "idle"
		if active[n.Name] {
			st = "active"
		}
		out = append(out, map[string]any{"id": "lrm:" + n.Name, "type": "lrm", "node": n.Name,
			"status": fmt.Sprintf("%s (%s, %s)", n.Name, st, stamp), "timestamp": now.Unix()})
	}
	for _, r := range resources {
		if !h.seesVM(q, r.Guest) {
			continue
		}
		sid := sidOf(r.VMID)
		state := translate.HAVerboseState(r.Config, r.State().Running())
		row := map[string]any{"id": "service:" + sid, "type": "service", "sid": sid, "node": r.Node,
			"crm_state": translate.HACRMState(r.Config), "state": state, "status": fmt.Sprintf("%s (%s, %s)", sid, r.Node, state),
			"request_state": r.Config.Requested()}
		if r.Config.Group != "" {
			row["group"] = r.Config.Group
		}
		if r.Config.MaxRestart != nil {
			row["max_restart"] = *r.Config.MaxRestart
		}
		if r.Config.MaxRelocate != nil {
			row["max_relocate"] = *r.Config.MaxRelocate
		}
		if r.Config.Comment != "" {
			row["comment"] = r.Config.Comment
		}
		out = append(out, row)
	}
	return out, nil
}

// haPower answers a power request on a VM the HA stack manages, as
// qemu-server does: the request becomes the resource's requested state
// (started, or stopped for stop and shutdown), in an hastart or hastop task
// that ends once it is requested; KubeVirt then runs or stops the VM (its
// run strategy). handled is false for VMs the HA stack leaves alone.
func (h *APIHandler) haPower(q *request, g kube.Guest, action string) (result any, handled bool, e *apiError) {
	c, ok := translate.HAConfigOf(g.Meta())
	if !ok || !c.Managed() {
		return nil, false, nil
	}
	typ, want, verb := "hastart", translate.HAStarted, "start"
	switch action {
	case "start":
	case "stop", "shutdown":
		if _, ok := q.p["overrule-shutdown"]; ok && action == "stop" {
			return nil, true, paramErr("overrule-shutdown", "Not applicable for HA resources.")
		}
		typ, want, verb = "hastop", translate.HAStopped, "stop"
	default:
		return nil, false, nil
	}
	c.State = want
	if e := h.writeHA(q, g, &c); e != nil {
		return nil, true, e
	}
	if action == "stop" && g.InstanceMeta() != nil {
		// Hard stop (ha-manager crm-command stop <sid> 0): the run
		// strategy stops it gracefully, a zero grace period at once.
		zero := int64(0)
		if fresh, err := q.c.Refresh(q.ctx(), g); err == nil {
			_ = q.c.StopVM(q.ctx(), fresh, &zero)
		}
	}
	res, e := h.begin(q, g, guestTask{typ: typ, goal: kube.GoalNone, log: fmt.Sprintf("Requesting HA %s for VM %d", verb, g.VMID)})
	return res, true, e
}

// rootNeeds asks for privileges on /, as PVE's HA API does.
func rootNeeds(privs ...string) needFunc {
	return func(h *APIHandler, q *request) []check {
		return []check{{path: "/", privs: privs}}
	}
}
