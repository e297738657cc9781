package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// configOnly are PUT/POST config parameters that steer the call.
var configOnly = map[string]bool{"delete": true, "revert": true, "digest": true, "skiplock": true, "force": true, "background_delay": true}

// cloudInitKeys are the keys whose change regenerates the cloud-init data.
var cloudInitKeys = []string{"ciuser", "cipassword", "sshkeys", "nameserver", "searchdomain", "citype", "ciupgrade", "name"}

// vmRequest is the translate request for a VM in namespace ns.
func (h *APIHandler) vmRequest(q *request, vmid int, node, ns string, cfg map[string]string) translate.VMRequest {
	claims := claimLookup(q, ns)
	return translate.VMRequest{
		VMID: vmid, Node: node, Namespace: ns, Config: cfg,
		NameTaken:     func(name string) bool { return q.c.VMNameTaken(ns, name) },
		StorageExists: q.c.StorageClassExists,
		FileStorage:   func(s string) bool { return h.isDirStorage(s) && !q.c.StorageClassExists(s) },
		ISOSize: func(claim string) (int64, bool) {
			pvc := q.c.CachedPVC(ns, claim)
			if pvc == nil {
				return 0, false
			}
			if n := translate.FileSizeOf(pvc.Annotations); n > 0 {
				return n, true // the image's size, as PVE shows it
			}
			return translate.ClaimInfoOf(pvc).Bytes, true
		},
		Claim:       claims,
		VolumeTaken: func(name string) (bool, error) { return q.c.VolumeNameTaken(q.ctx(), ns, name) },
	}
}

// claimLookup describes the cached claims of namespace ns. The size of a
// claim CDI made for a spec.storage DataVolume is its disk's: on a
// Filesystem-mode claim CDI added its filesystem overhead, which PVE's
// size= does not count.
func claimLookup(q *request, ns string) translate.ClaimLookup {
	return func(name string) (translate.ClaimInfo, bool) {
		pvc := q.c.CachedPVC(ns, name)
		if pvc == nil {
			return translate.ClaimInfo{}, false
		}
		ci := translate.ClaimInfoOf(pvc)
		filesystem := pvc.Spec.VolumeMode == nil || *pvc.Spec.VolumeMode == corev1.PersistentVolumeFilesystem
		if dv := q.c.DataVolume(ns, name); ci.DataVolume && filesystem && dv != nil && dv.Spec.Storage != nil {
			ci.Bytes = translate.DiskBytes(ci.Bytes, q.c.FilesystemOverhead(q.ctx(), pvc.Spec.StorageClassName), true)
		}
		return ci, true
	}
}

// configParams splits a config call into config keys and the list of keys
// to delete.
func configParams(p params) (map[string]string, []string, *apiError) {
	cfg := map[string]string{}
	for k := range p {
		if configOnly[k] {
			continue
		}
		v, _, e := p.str(k)
		if e != nil {
			return nil, nil, e
		}
		cfg[k] = v
	}
	var deletes []string
	if d, ok, e := p.str("delete"); e != nil {
		return nil, nil, e
	} else if ok {
		deletes = splitKeyList(d)
	}
	return cfg, deletes, nil
}

// splitKeyList splits PVE's delete= and revert= lists (pve-configid-list:
// separated by commas, semicolons or spaces).
func splitKeyList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
}

// updateConfig applies PUT/POST …/config: values, delete=, digest=. The
// change goes into the VM template; KubeVirt applies what cannot be
// hot-plugged at the next restart, which …/pending shows.
func (h *APIHandler) updateConfig(q *request) (kube.Guest, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return g, e
	}
	if e := snapshotLocked(q, g); e != nil {
		return g, e
	}
	cfg, deletes, e := configParams(q.p)
	if e != nil {
		return g, e
	}
	if r := q.p["revert"]; r != "" {
		if deletes, e = revertPending(translate.PendingView(g.VM(), g.VMI(), claimLookup(q, g.Namespace())), splitKeyList(r), cfg, deletes); e != nil {
			return g, e
		}
	}
	if len(cfg) == 0 && len(deletes) == 0 {
		return g, nil
	}
	// template is a config key on PVE too: template=1 converts (Ansible's
	// only way), setting what is already so changes nothing.
	makeTemplate := false
	if v, ok := cfg["template"]; ok {
		on, e := params{"template": v}.boolean("template", false)
		if e != nil {
			return g, e
		}
		switch {
		case on && !g.Template():
			if g.State().Running() {
				return g, newError(http.StatusInternalServerError, "you can't convert a VM to template if VM is running")
			}
			makeTemplate = true
		case !on && g.Template():
			return g, newError(http.StatusInternalServerError, "you can't convert a template to a VM")
		}
		delete(cfg, "template")
		if len(cfg) == 0 && len(deletes) == 0 && !makeTemplate {
			return g, nil
		}
	}
	force, e := q.p.boolean("force", false)
	if e != nil {
		return g, e
	}
	digest := q.p["digest"]
	var destroy []string
	g, e = h.rewrite(q, g, func(g kube.Guest) (*kubevirtv1.VirtualMachine, *apiError) {
		if digest != "" && translate.ConfigView(g.VM(), claimLookup(q, g.Namespace()))["digest"] != digest {
			// PVE's assert_if_modified dies: a 500 whose reason clients show.
			return nil, newError(http.StatusInternalServerError, "%v", kube.ErrModified)
		}
		req := h.vmRequest(q, g.VMID, g.Node, g.Namespace(), cfg)
		req.Force = force
		u, errs := translate.UpdateVMChange(g.VM(), req, deletes)
		if len(errs) > 0 {
			return nil, paramError(errs)
		}
		if e := mayDestroy(q, g, u.Destroy); e != nil {
			return nil, e
		}
		want := u.VM
		ciChanged := touches(cfg, deletes, cloudInitKeys...) || touches(cfg, deletes, "ipconfig", "net", "ide", "sata", "scsi", "virtio")
		if e := h.applyCloudInit(q, g.VMID, want, cfg["cipassword"], ciChanged); e != nil {
			return nil, e
		}
		if makeTemplate {
			translate.MarkTemplate(want)
		}
		destroy = u.Destroy
		return want, nil
	}, translate.AnnotationConfig, translate.AnnotationName, translate.AnnotationDiskKeys)
	if e != nil {
		return g, e
	}
	return g, h.destroyVolumes(q, g, destroy)
}

// mayDestroy refuses a change that would delete volumes another VM uses,
// or that the caller may not delete (checked before the VM is written, so
// that a refused delete does not leave the config changed).
func mayDestroy(q *request, g kube.Guest, names []string) *apiError {
	if len(names) == 0 {
		return nil
	}
	ns := g.Namespace()
	dataVolume := false // a claim goes with its DataVolume
	claims := claimLookup(q, ns)
	for _, n := range names {
		if users := q.c.ClaimUsers(ns, n, g.VM().UID); len(users) > 0 {
			return newError(http.StatusInternalServerError, "volume '%s' is also used by VirtualMachine %s/%s; not deleting it", n, ns, users[0].Name)
		}
		for _, t := range g.VM().Spec.DataVolumeTemplates {
			dataVolume = dataVolume || t.Name == n
		}
		// A detached disk's DataVolume has no template left.
		ci, _ := claims(n)
		dataVolume = dataVolume || ci.DataVolume
	}
	needs := []kube.Access{{Namespace: ns, Resource: "persistentvolumeclaims", Verb: "delete"}}
	if dataVolume {
		needs = append(needs, kube.Access{Namespace: ns, Group: "cdi.kubevirt.io", Resource: "datavolumes", Verb: "delete"})
	}
	for _, a := range needs {
		ok, err := q.c.CanINow(q.ctx(), a)
		switch {
		case errors.Is(err, kube.ErrNoIdentity):
			return nil // the plugin's own rights: the delete itself decides
		case err != nil:
			return kubeError(err)
		case !ok:
			return kubeDenied(fmt.Errorf("cannot delete %s in namespace %s", a.Resource, ns))
		}
	}
	return nil
}

// destroyVolumes deletes the volumes a written config change freed.
func (h *APIHandler) destroyVolumes(q *request, g kube.Guest, names []string) *apiError {
	for _, n := range names {
		if err := q.c.DeleteVolume(q.ctx(), g.Namespace(), n); err != nil {
			h.logger.Warn("volume freed by a config change not deleted", zap.String("namespace", g.Namespace()), zap.String("volume", n), zap.Error(err))
			e := kubeError(err)
			e.Message = fmt.Sprintf("VM %d updated, but deleting volume '%s' failed: %s", g.VMID, n, e.Message)
			return e
		}
	}
	return nil
}

// rewrite builds a VM change from the current object and writes it. KubeVirt
// rewrites VM objects often (status, generation), so a write that loses the
// race is rebuilt on a fresh read and tried again; build decides whether
// the change still applies (the digest check does).
func (h *APIHandler) rewrite(q *request, g kube.Guest, build func(kube.Guest) (*kubevirtv1.VirtualMachine, *apiError), annotations ...string) (kube.Guest, *apiError) {
	for attempt := 0; ; attempt++ {
		want, e := build(g)
		if e != nil {
			return g, e
		}
		out, err := q.c.ReplaceVM(q.ctx(), g, want, annotations...)
		if err == nil {
			if out != nil {
				g = g.WithVM(out)
			}
			return g, nil
		}
		if !errors.Is(err, kube.ErrModified) {
			return g, kubeError(err)
		}
		if attempt == 4 {
			return g, newError(http.StatusServiceUnavailable, "VM %d keeps changing; try again", g.VMID)
		}
		fresh, err := q.c.Refresh(q.ctx(), g)
		if err != nil {
			return g, missingVM(g.Node, g.VMID)
		}
		g = fresh
	}
}

// revertPending turns revert= into the config change that takes pending
// values back: the running value is set again, a device the running VM
// does not have yet is dropped. Keys without a pending change are left
// alone, as on PVE. A device removed from the config while the VM still
// runs has no config left to restore, so that revert is refused.
func revertPending(rows []translate.PendingEntry, keys []string, cfg map[string]string, deletes []string) ([]string, *apiError) {
	byKey := map[string]translate.PendingEntry{}
	for _, r := range rows {
		byKey[r.Key] = r
	}
	for _, k := range keys {
		if !translate.ValidConfigKey(k) {
			return deletes, paramErr("revert", "unknown option '%s'", k)
		}
		if _, set := cfg[k]; set || slices.Contains(deletes, k) {
			return deletes, paramErr("revert", "unable to revert and change the same key '%s'", k)
		}
		r, ok := byKey[k]
		switch {
		case !ok || (r.Pending == nil && r.Delete == 0):
		case r.Delete != 0:
			return deletes, newError(http.StatusInternalServerError, "unable to revert the removal of '%s' while the VM runs: set it again, or restart the VM", k)
		case r.Value == nil:
			deletes = append(deletes, k)
		default:
			cfg[k] = fmt.Sprint(r.Value)
		}
	}
	return deletes, nil
}

// touches tells whether a change sets or deletes any key with one of the
// prefixes.
func touches(cfg map[string]string, deletes []string, prefixes ...string) bool {
	for _, p := range prefixes {
		for k := range cfg {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
		for _, k := range deletes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}

// applyCloudInit (re)writes the VM's cloud-init Secret when its drive is
// configured and takes its data from that Secret (a VM made elsewhere
// keeps its own data). The password is kept in the Secret only; a change
// that does not set a new one keeps the old, unless cipassword left the
// config.
func (h *APIHandler) applyCloudInit(q *request, vmid int, vm *kubevirtv1.VirtualMachine, password string, changed bool) *apiError {
	if !changed || vm.UID == "" {
		return nil
	}
	name := translate.CloudInitSecretName(vmid)
	if secret, _, _ := translate.CloudInitSource(vm); secret != name {
		return nil
	}
	if password == "" && translate.StoredConfig(vm)["cipassword"] != "" {
		if s, err := q.c.Secret(q.ctx(), vm.Namespace, name); err == nil {
			password = string(s.Data["cipassword"])
		} else if !kube.IsNotFound(err) {
			return kubeError(err)
		}
	}
	user, network, err := renderCloudInit(vm, password)
	if err != nil {
		return paramErr("ipconfig0", "%v", err)
	}
	data := map[string][]byte{"userdata": []byte(user), "networkdata": []byte(network)}
	if password != "" {
		data["cipassword"] = []byte(password)
	}
	if err := q.c.ApplySecret(q.ctx(), vm, name, data); err != nil {
		return kubeError(err)
	}
	return nil
}

// renderCloudInit renders the VM's user-data and network-config from its
// config, with each ipconfigN matched to its NIC's MAC.
func renderCloudInit(vm *kubevirtv1.VirtualMachine, password string) (user, network string, err error) {
	macs := map[string]string{}
	for _, i := range vm.Spec.Template.Spec.Domain.Devices.Interfaces {
		macs[i.Name] = i.MacAddress
	}
	return translate.CloudInit(translate.StoredConfig(vm), password, macs)
}

// putQemuConfig is the synchronous config update: data null.
func (h *APIHandler) putQemuConfig(q *request) (any, *apiError) {
	if _, e := h.updateConfig(q); e != nil {
		return nil, e
	}
	return nil, nil
}

// putQemuUnlink is PVE's unlink (qemu-server runs it as a config update
// with delete=<idlist>): each disk key listed leaves the config; with
// force=1 its volume is deleted, otherwise it stays as unusedN; an unusedN
// listed is always deleted. Answers null.
func (h *APIHandler) putQemuUnlink(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid", "idlist", "force"); e != nil {
		return nil, e
	}
	idlist, ok, e := q.p.str("idlist")
	if e != nil {
		return nil, e
	}
	if !ok || len(splitKeyList(idlist)) == 0 {
		return nil, paramErr("idlist", "property is missing and it is not optional")
	}
	p := params{"delete": idlist}
	if f, ok := q.p["force"]; ok {
		p["force"] = f
	}
	uq := *q
	uq.p = p
	if _, e := h.updateConfig(&uq); e != nil {
		return nil, e
	}
	return nil, nil
}

// postQemuConfig is the asynchronous variant: a qmconfig task.
func (h *APIHandler) postQemuConfig(q *request) (any, *apiError) {
	before, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	g, e := h.updateConfig(q)
	if e != nil {
		return nil, e
	}
	t := guestTask{typ: translate.TaskConfig, goal: kube.GoalNone, log: fmt.Sprintf("update VM %d: %s", g.VMID, paramSummary(q.p))}
	if before.State().Running() && translate.LiveUpdatable(before.VM(), g.VM()) {
		// As qemu-server's hot-plug in the config task: it ends once
		// KubeVirt has taken the new CPUs or memory into the instance,
		// or said that they need a restart.
		spec := h.taskSpec(q, g, translate.TaskConfig, kube.GoalLiveUpdated, liveUpdateWait, t.log)
		spec.Object = strconv.FormatInt(g.VM().Generation, 10)
		return h.beginSpec(q, spec)
	}
	return h.begin(q, g, t)
}

// liveUpdateWait bounds how long a config task waits for KubeVirt to
// take a CPU or memory change into the running instance.
const liveUpdateWait = 30 * time.Second

// paramSummary lists the keys a config call touched, without values (they
// may hold passwords).
func paramSummary(p params) string {
	var keys []string
	for k := range p {
		if k != "digest" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return "-" + strings.Join(keys, " -")
}

// putQemuResize grows a disk: the DataVolume template's size (so config
// shows it) and the bound claim. Shrinking is refused like PVE does.
func (h *APIHandler) putQemuResize(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := snapshotLocked(q, g); e != nil {
		return nil, e
	}
	disk, ok, e := q.p.str("disk")
	if e != nil {
		return nil, e
	}
	if !ok {
		return nil, paramErr("disk", "property is missing and it is not optional")
	}
	sizeArg, ok, e := q.p.str("size")
	if e != nil {
		return nil, e
	}
	if !ok {
		return nil, paramErr("size", "property is missing and it is not optional")
	}
	delta, bytes, err := translate.ParseResize(sizeArg)
	if err != nil {
		return nil, paramErr("size", "%v", err)
	}
	var cur, newSize int64
	var claim string
	g, e = h.rewrite(q, g, func(g kube.Guest) (*kubevirtv1.VirtualMachine, *apiError) {
		r, err := translate.ResizeDisk(g.VM(), disk, delta, bytes)
		switch {
		case errors.Is(err, translate.ErrShrinkDisk):
			// qemu-server dies here: a 500, not a parameter error.
			return nil, newError(http.StatusInternalServerError, "%v", err)
		case err != nil:
			return nil, paramErr("disk", "%v", err)
		}
		if q.c.CachedPVC(g.Namespace(), r.Claim) != nil {
			if sc := r.StorageClass; sc != "" && !q.c.StorageClassExpands(sc) {
				return nil, paramErr("disk", "storage '%s' cannot grow volumes (its StorageClass does not allow volume expansion)", sc)
			}
		}
		cur, newSize, claim = r.From, r.To, r.Claim
		return r.VM, nil
	}, translate.AnnotationConfig)
	if e != nil {
		return nil, e
	}
	line := fmt.Sprintf("resize disk %s of VM %d from %s to %s", disk, g.VMID, translate.FormatSize(cur), translate.FormatSize(newSize))
	spec := h.taskSpec(q, g, translate.TaskResize, kube.GoalNone, 0, line)
	growth, err := q.c.GrowClaim(q.ctx(), g.Namespace(), claim, newSize)
	switch {
	case kube.IsNotFound(err):
		// Not provisioned yet: the DataVolume creates it at the new size.
	case err != nil:
		spec.Err = kubeTaskError(err)
	default:
		spec.Log = append(spec.Log, growthLog(claim, growth)...)
		spec.Log = append(spec.Log, expandDisksLog(q, disk)...)
	}
	return h.beginSpec(q, spec)
}

// growthLog says what the claim asked for a disk's new size.
func growthLog(claim string, g kube.ClaimGrowth) []string {
	var line string
	switch {
	case g.Filesystem && g.Grown():
		line = fmt.Sprintf("claim '%s' requests %s (the disk image plus CDI's filesystem overhead of %g%%)", claim, translate.FormatSize(g.Request), g.Overhead*100)
	case g.Grown():
		line = fmt.Sprintf("claim '%s' requests %s", claim, translate.FormatSize(g.Request))
	default:
		line = fmt.Sprintf("claim '%s' already holds %s, room for the new size: left as it is", claim, translate.FormatSize(g.Current))
	}
	return []string{line}
}

// expandDisksLog warns that the guest will not see the disk grow unless
// KubeVirt's ExpandDisks feature gate is on: without it virt-launcher
// never grows a disk image or tells the guest of a grown block device.
func expandDisksLog(q *request, disk string) []string {
	on, err := q.c.FeatureGate(q.ctx(), kube.GateExpandDisks)
	switch {
	case err != nil:
		return []string{fmt.Sprintf("WARN: the guest sees disk %s grow only if KubeVirt's %s feature gate is on (the KubeVirt CR is not readable: %v)", disk, kube.GateExpandDisks, err)}
	case !on:
		return []string{fmt.Sprintf("WARN: KubeVirt's %s feature gate is off: the guest keeps seeing disk %s at its old size (enable it in the KubeVirt CR: spec.configuration.developerConfiguration.featureGates)", kube.GateExpandDisks, disk)}
	}
	return nil
}

// postQemuTemplate turns a stopped VM into a template: labelled, Halted,
// refused to start.
func (h *APIHandler) postQemuTemplate(q *request) (any, *apiError) {
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if e := snapshotLocked(q, g); e != nil {
		return nil, e
	}
	if g.State().Running() {
		return nil, newError(http.StatusInternalServerError, "you can't convert a VM to template if VM is running")
	}
	if g.Template() {
		return nil, newError(http.StatusInternalServerError, "you can't convert a template to a template")
	}
	if snaps, err := q.c.Snapshots(g); err == nil && len(snaps) > 0 {
		return nil, newError(http.StatusInternalServerError, "unable to create template, because VM contains snapshots")
	}
	g, e = h.rewrite(q, g, func(g kube.Guest) (*kubevirtv1.VirtualMachine, *apiError) {
		want := g.VM().DeepCopy()
		translate.MarkTemplate(want)
		return want, nil
	}, translate.AnnotationConfig)
	if e != nil {
		return nil, e
	}
	return h.begin(q, g, guestTask{typ: translate.TaskTemplate, goal: kube.GoalNone, timeout: time.Minute, log: fmt.Sprintf("convert VM %d to a template", g.VMID)})
}
