package translate

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestKeysAreQualifiedNames(t *testing.T) {
	tests := []struct {
		key  string
		want string
	}{
		{LabelVMID, "pve.caddy-proxmox.io/vmid"},
		{LabelTemplate, "pve.caddy-proxmox.io/template"},
		{AnnotationNode, "pve.caddy-proxmox.io/node"},
		{AnnotationName, "pve.caddy-proxmox.io/name"},
		{AnnotationConfig, "pve.caddy-proxmox.io/config"},
		{AnnotationLock, "pve.caddy-proxmox.io/lock"},
	}
	for _, tt := range tests {
		if tt.key != tt.want {
			t.Errorf("key = %q, want %q", tt.key, tt.want)
		}
		if errs := validation.IsQualifiedName(tt.key); len(errs) > 0 {
			t.Errorf("%q is not a valid label/annotation key: %v", tt.key, errs)
		}
	}
	// Values the package produces for labels must be valid label values.
	for _, v := range []string{"100", "999999999", "true"} {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%q is not a valid label value: %v", v, errs)
		}
	}
}

func TestUPIDKeyIsValidObjectNamePart(t *testing.T) {
	for _, u := range []UPID{
		{Node: "pve1", PID: 1, PStart: 2, StartTime: 3},
		{Node: "PVE-Node-With-A-Very-Long-Name-Indeed", PID: 0xFFFFFFFF},
		{},
	} {
		name := "pve-task-" + u.Key()
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("%q is not a valid object name: %v", name, errs)
		}
	}
}
