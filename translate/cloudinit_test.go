package translate

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// TestCloudInitView: GET …/cloudinit lists PVE's cloud-init options that
// are set, with their values as GET …/config types them, the password
// masked; false values (ciupgrade=0) and ipconfigN are left out, as PVE's
// cloudinit_pending does for options that are in sync.
func TestCloudInitView(t *testing.T) {
	vm := buildOK(t, map[string]string{
		"name": "web", "net0": "virtio,bridge=vmbr0", "ide2": "local-lvm:cloudinit", "ciuser": "ops", "cipassword": "s3cret",
		"ipconfig0": "ip=dhcp", "nameserver": "1.1.1.1", "sshkeys": "ssh-ed25519%20AAAAC3Nza%20me%40host", "ciupgrade": "1", "citype": "nocloud",
	})
	want := []PendingEntry{
		{Key: "cipassword", Value: MaskedPassword},
		{Key: "citype", Value: "nocloud"},
		{Key: "ciuser", Value: "ops"},
		{Key: "ciupgrade", Value: int64(1)},
		{Key: "nameserver", Value: "1.1.1.1"},
		{Key: "sshkeys", Value: "ssh-ed25519%20AAAAC3Nza%20me%40host"},
	}
	if got := CloudInitView(vm); !reflect.DeepEqual(got, want) {
		t.Fatalf("view\n got %#v\nwant %#v", got, want)
	}
	off := buildOK(t, map[string]string{"ciupgrade": "0", "ipconfig0": "ip=dhcp"})
	if got := CloudInitView(off); len(got) != 0 {
		t.Fatalf("ciupgrade=0 and ipconfig0 alone: %#v, want no rows", got)
	}
	// PVE's shape: an empty list is [], never null.
	if buf, _ := json.Marshal(CloudInitView(off)); string(buf) != "[]" {
		t.Fatalf("empty view %s", buf)
	}
}

// TestCloudInitSourceAndMetaData: the drive's data source (this API's
// Secret, or data written inline by whoever made the VM) and the meta-data
// KubeVirt writes beside it.
func TestCloudInitSourceAndMetaData(t *testing.T) {
	vm := buildOK(t, map[string]string{"name": "web", "ide2": "local-lvm:cloudinit"})
	vm.Name, vm.Namespace = "web", "default"
	if secret, user, network := CloudInitSource(vm); secret != "vm-100-cloudinit" || user != "" || network != "" {
		t.Fatalf("source %q %q %q", secret, user, network)
	}
	// NoCloud: instance-id is the firmware UUID; without one, the UUID
	// KubeVirt derives from the VM name (UUIDv5 of "web" in KubeVirt's
	// namespace, as Python's uuid.uuid5 computes it too).
	vm.Spec.Template.Spec.Domain.Firmware.UUID = "5b3e0c1a-0000-4000-8000-00000000000a"
	if got := CloudInitMetaData(vm); got != `{"instance-id":"5b3e0c1a-0000-4000-8000-00000000000a","local-hostname":"web"}` {
		t.Fatalf("nocloud meta %s", got)
	}
	vm.Spec.Template.Spec.Domain.Firmware.UUID = ""
	if got := CloudInitMetaData(vm); got != `{"instance-id":"`+FirmwareUUID(vm)+`","local-hostname":"web"}` || FirmwareUUID(vm) != "d32ff544-f682-571b-8677-3762f07ab8a4" {
		t.Fatalf("nocloud meta without a firmware UUID %s (%s)", got, FirmwareUUID(vm))
	}
	cd := buildOK(t, map[string]string{"name": "db.lab", "ide2": "local-lvm:cloudinit", "citype": "configdrive2"})
	cd.Name, cd.Namespace = "db-lab", "lab"
	cd.Spec.Template.Spec.Domain.Firmware.UUID = "5b3e0c1a-0000-4000-8000-00000000000b"
	if got := CloudInitMetaData(cd); got != `{"instance_id":"db-lab.lab","hostname":"db-lab","uuid":"5b3e0c1a-0000-4000-8000-00000000000b"}` {
		t.Fatalf("configdrive meta %s", got)
	}

	inline := &kubevirtv1.VirtualMachine{Spec: kubevirtv1.VirtualMachineSpec{Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
		Spec: kubevirtv1.VirtualMachineInstanceSpec{Volumes: []kubevirtv1.Volume{
			{Name: "root", VolumeSource: kubevirtv1.VolumeSource{ContainerDisk: &kubevirtv1.ContainerDiskSource{Image: "x"}}},
			{Name: "ci", VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
				UserData: "#cloud-config\n", NetworkDataBase64: base64.StdEncoding.EncodeToString([]byte("version: 2\n"))}}},
		}},
	}}}
	if secret, user, network := CloudInitSource(inline); secret != "" || user != "#cloud-config\n" || network != "version: 2\n" {
		t.Fatalf("inline source %q %q %q", secret, user, network)
	}
	other := inline.DeepCopy()
	other.Spec.Template.Spec.Volumes[1].CloudInitNoCloud = nil
	other.Spec.Template.Spec.Volumes[1].CloudInitConfigDrive = &kubevirtv1.CloudInitConfigDriveSource{NetworkDataSecretRef: &corev1.LocalObjectReference{Name: "mine"}}
	if secret, _, _ := CloudInitSource(other); secret != "mine" {
		t.Fatalf("config drive secret %q", secret)
	}
	if has, configDrive := CloudInitDrive(other); !has || !configDrive {
		t.Fatalf("drive %v %v", has, configDrive)
	}
}
