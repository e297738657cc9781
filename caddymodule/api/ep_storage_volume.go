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

// deleteStorageVolume deletes an ISO image (its claim, through the
// DataVolume that made it, if any), answering an imgdel task that ends when
// the claim is gone. VM disks are not deleted here.
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
	s := q.r.PathValue("storage")
	if !q.c.StorageClassExists(s) {
		return nil, newError(http.StatusInternalServerError, "storage '%s' does not exist", s)
	}
	volid, file, e := isoVolume(q)
	if e != nil {
		return nil, e
	}
	pvc, e := h.isoClaim(q, s, file)
	if e != nil {
		return nil, e
	}
	if users := q.c.ISOUsers(pvc.Namespace, pvc.Name); len(users) > 0 {
		ids := make([]string, len(users))
		for i, g := range users {
			ids[i] = fmt.Sprint(g.VMID)
		}
		return nil, newError(http.StatusInternalServerError, "volume '%s' is still in use by VM %s (remove the CD-ROM first)", volid, strings.Join(ids, ", "))
	}
	if err := q.c.DeleteISO(q.ctx(), pvc); err != nil && !kube.IsNotFound(err) {
		return nil, kubeError(err)
	}
	h.logger.Info("deleting ISO image", zap.String("volid", volid), zap.String("claim", pvc.Namespace+"/"+pvc.Name), zap.String("user", q.id.ID()))
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

// isoVolume reads the {volume} of a delete: "<storage>:iso/<file>" or
// "iso/<file>" (PVE prefixes the storage). Anything else is refused: VM
// disks are deleted through their VM.
func isoVolume(q *request) (volid, file string, e *apiError) {
	s := q.r.PathValue("storage")
	volume := q.r.PathValue("volume")
	name := volume
	if sid, rest, ok := strings.Cut(volume, ":"); ok {
		if sid != s {
			return "", "", paramErr("volume", "storage ID mismatch (%s != %s)", sid, s)
		}
		name = rest
	}
	volid = s + ":" + name
	if f, ok := strings.CutPrefix(name, "iso/"); ok && f != "" && !strings.Contains(f, "/") {
		return volid, f, nil
	}
	if diskClaimRE.MatchString(name) {
		return "", "", newError(http.StatusInternalServerError, "deleting VM disk volume '%s' here is not supported: remove it from the VM's config (it stays as unusedN) and delete it there", volid)
	}
	return "", "", newError(http.StatusInternalServerError, "volume '%s' does not exist", volid)
}

// isoClaim finds the claim holding ISO image file on storage s, among
// every served namespace, the download namespace's first; downloads still
// running or failed count (they can be deleted). Copies of one file in
// several other namespaces are ambiguous.
func (h *APIHandler) isoClaim(q *request, s, file string) (*corev1.PersistentVolumeClaim, *apiError) {
	var found []*corev1.PersistentVolumeClaim
	for _, pvc := range q.c.ISOClaimsOf(s) {
		if pvc.Annotations[translate.AnnotationISOFile] != file || pvc.DeletionTimestamp != nil {
			continue
		}
		if pvc.Namespace == h.defaultNamespace() {
			return pvc, nil
		}
		found = append(found, pvc)
	}
	switch len(found) {
	case 0:
		return nil, newError(http.StatusInternalServerError, "volume '%s:iso/%s' does not exist", s, file)
	case 1:
		return found[0], nil
	}
	var where []string
	for _, pvc := range found {
		where = append(where, pvc.Namespace)
	}
	sort.Strings(where)
	return nil, newError(http.StatusInternalServerError, "volume '%s:iso/%s' exists in several pools (%s): delete the claims there", s, file, strings.Join(where, ", "))
}
