package api

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// deleteStorageVolume deletes a file of the directory storage (its claim,
// through the DataVolume that made it, if any), answering an imgdel task
// that ends when the claim is gone. VM disks are not deleted here.
func (h *APIHandler) deleteStorageVolume(q *request) (any, *apiError) {
	node, e := h.node(q)
	if e != nil {
		return nil, e
	}
	if e := q.p.allowOnly("delay"); e != nil {
		return nil, e
	}
	delay, e := q.p.integer("delay", 0, 1, 30)
	if e != nil {
		return nil, e
	}
	s := q.pathValue("storage")
	if !h.storageExists(q, s) {
		return nil, noStorage(s)
	}
	volid, content, file, e := h.fileVolumeOf(q)
	if e != nil {
		return nil, e
	}
	pvc, e := h.fileClaim(q, content, file)
	if e != nil {
		return nil, e
	}
	if users := q.c.FileUsers(pvc.Namespace, pvc.Name); len(users) > 0 {
		ids := make([]string, len(users))
		for i, g := range users {
			ids[i] = fmt.Sprint(g.VMID)
		}
		return nil, newError(http.StatusInternalServerError, "volume '%s' is still in use by VM %s (remove the CD-ROM first)", volid, strings.Join(ids, ", "))
	}
	if err := q.c.DeleteFile(q.ctx(), pvc); err != nil && !kube.IsNotFound(err) {
		return nil, kubeError(err)
	}
	h.logger.Info("deleting file", zap.String("volid", volid), zap.String("claim", pvc.Namespace+"/"+pvc.Name), zap.String("user", q.id.ID()))
	upid, e := h.beginSpec(q, kube.TaskSpec{
		Node: node.Name, Type: taskImgDel, ID: s, User: q.id.ID(), Goal: kube.GoalClaimGone,
		Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, Object: volid, Timeout: 5 * time.Minute,
		Log: []string{fmt.Sprintf("deleting claim %s/%s", pvc.Namespace, pvc.Name)},
	})
	if e != nil || delay == 0 {
		return upid, e
	}
	// As PVE: wait up to delay seconds; null when the task ended well.
	end := time.Now().Add(time.Duration(delay) * time.Second)
	for {
		t, err := q.c.Tasks.Get(q.ctx(), upid.(string))
		if err == nil && !t.Running() {
			if translate.ExitIsError(t.ExitStatus) {
				return nil, newError(http.StatusInternalServerError, "%s", t.ExitStatus)
			}
			return nil, nil
		}
		if time.Now().After(end) {
			return upid, nil
		}
		select {
		case <-q.ctx().Done():
			return upid, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// fileVolumeOf reads the {volume} of a delete: a file of the directory
// storage, "<s>:<content>/<file>" or "<content>/<file>" (PVE prefixes the
// storage). Anything else is refused: VM disks are deleted through their
// VM.
func (h *APIHandler) fileVolumeOf(q *request) (volid, content, file string, e *apiError) {
	s := q.pathValue("storage")
	volume := q.pathValue("volume")
	name := volume
	if sid, rest, ok := strings.Cut(volume, ":"); ok {
		if sid != s {
			return "", "", "", paramErr("volume", "storage ID mismatch (%s != %s)", sid, s)
		}
		name = rest
	}
	volid = s + ":" + name
	if h.isDirStorage(s) {
		if content, file, ok := fileVolume(s, volid); ok {
			return volid, content, file, nil
		}
	}
	if id := translate.StateVolumeOwner(name); id != 0 || translate.StateClaimOwner(name, nil) != "" {
		// KubeVirt keeps a VM's EFI variables and TPM state in one claim
		// while the VM has efidisk0 or tpmstate0: deleting it here would
		// take a running VM's state, which PVE refuses for a volume in use.
		owner := "its VM"
		if id != 0 {
			owner = fmt.Sprintf("VM %d", id)
		}
		return "", "", "", newError(http.StatusInternalServerError, "volume '%s' is in use by %s: it holds the VM's EFI/TPM state (efidisk0, tpmstate0), which goes when they are removed from its config", volid, owner)
	}
	if diskClaimRE.MatchString(name) {
		return "", "", "", newError(http.StatusInternalServerError, "deleting VM disk volume '%s' here is not supported: remove it from the VM's config (it stays as unusedN) and delete it there", volid)
	}
	return "", "", "", newError(http.StatusInternalServerError, "volume '%s' does not exist", volid)
}

// fileClaim finds the claim holding a file of the directory storage, among
// every served namespace, the download namespace's first; downloads still
// running or failed count (they can be deleted). Copies of one file in
// several other namespaces are ambiguous.
func (h *APIHandler) fileClaim(q *request, content, file string) (*corev1.PersistentVolumeClaim, *apiError) {
	volid := h.LocalStorage.name() + ":" + content + "/" + file
	var found []*corev1.PersistentVolumeClaim
	for _, pvc := range q.c.FileClaims(content) {
		if _, f, _ := translate.FileOf(pvc.Annotations); f != file || pvc.DeletionTimestamp != nil {
			continue
		}
		if pvc.Namespace == h.defaultNamespace() {
			return pvc, nil
		}
		found = append(found, pvc)
	}
	switch len(found) {
	case 0:
		return nil, newError(http.StatusInternalServerError, "volume '%s' does not exist", volid)
	case 1:
		return found[0], nil
	}
	var where []string
	for _, pvc := range found {
		where = append(where, pvc.Namespace)
	}
	sort.Strings(where)
	return nil, newError(http.StatusInternalServerError, "volume '%s' exists in several pools (%s): delete the claims there", volid, strings.Join(where, ", "))
}
