package api

import (
	"errors"
	"net/http"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// getQemuCloudinit is GET …/cloudinit: the cloud-init options with the
// values the drive was generated from.
func (h *APIHandler) getQemuCloudinit(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid"); e != nil {
		return nil, e
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	return translate.CloudInitView(g.VM()), nil
}

// putQemuCloudinit is PUT …/cloudinit, "Regenerate and change cloudinit
// config drive": the Secret is rendered again from the VM as the apiserver
// has it now (not the cache: bpg calls this right after a config change,
// possibly on another replica), so a drive that missed a change catches
// up; doing it twice changes nothing. Without a cloud-init drive it does
// nothing, as on PVE. KubeVirt reads the Secret when an instance starts:
// a running guest gets the new data at its next start, as KubeVirt cannot
// swap the medium of a running instance the way PVE does. Data null.
func (h *APIHandler) putQemuCloudinit(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid"); e != nil {
		return nil, e
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	fresh, err := q.c.Refresh(q.ctx(), g)
	if errors.Is(err, kube.ErrNotFound) {
		return nil, missingVM(g.Node, g.VMID)
	}
	if err != nil {
		return nil, kubeError(err)
	}
	return nil, h.applyCloudInit(q, fresh.VMID, fresh.VM(), "", true)
}

// getQemuCloudinitDump is GET …/cloudinit/dump?type=user|network|meta: the
// generated text, a plain string, rendered from the config as PVE does (or
// the data a VM made elsewhere carries inline). The password shows only to
// callers who may change it (VM.Config.Cloudinit), as on PVE; meta is what
// KubeVirt writes beside the data.
func (h *APIHandler) getQemuCloudinitDump(q *request) (any, *apiError) {
	if e := q.p.allowOnly("node", "vmid", "type"); e != nil {
		return nil, e
	}
	typ, ok, e := q.p.str("type")
	if e != nil {
		return nil, e
	}
	switch {
	case !ok:
		return nil, paramErr("type", "property is missing and it is not optional")
	case typ != "user" && typ != "network" && typ != "meta":
		return nil, paramErr("type", "value '%s' does not have a value in the enumeration 'user, network, meta'", typ)
	}
	g, e := h.guest(q)
	if e != nil {
		return nil, e
	}
	if typ == "meta" {
		return translate.CloudInitMetaData(g.VM()), nil
	}
	if secret, user, network := translate.CloudInitSource(g.VM()); secret == "" && user+network != "" {
		// A VM made elsewhere, its data written into the drive itself.
		if typ == "user" {
			return user, nil
		}
		return network, nil
	}
	password := ""
	if typ == "user" && translate.StoredConfig(g.VM())["cipassword"] != "" {
		if password, e = h.cloudInitPassword(q, g); e != nil {
			return nil, e
		}
	}
	user, network, err := renderCloudInit(g.VM(), password)
	if err != nil {
		return nil, newError(http.StatusInternalServerError, "%v", err)
	}
	if typ == "user" {
		return user, nil
	}
	return network, nil
}

// cloudInitPassword is the password for a dump: the one in the Secret for
// callers with VM.Config.Cloudinit, PVE's mask for the others (and when
// Kubernetes does not let the caller read the Secret).
func (h *APIHandler) cloudInitPassword(q *request, g kube.Guest) (string, *apiError) {
	may, err := h.decide(q, vmPath(g), g.Namespace(), h.guestPool(q.c, g), translate.PrivConfigCloudinit, false)
	if err != nil || !may {
		return translate.MaskedPassword, nil
	}
	s, err := q.c.Secret(q.ctx(), g.Namespace(), translate.CloudInitSecretName(g.VMID))
	switch {
	case err == nil && len(s.Data["cipassword"]) > 0:
		return string(s.Data["cipassword"]), nil
	case err == nil, kube.IsNotFound(err), kube.IsDenied(err):
		return translate.MaskedPassword, nil
	}
	return "", kubeError(err)
}
