package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestBootableVMSpec: a create with a disk, an ISO CD-ROM, cloud-init and
// a NIC produces a VirtualMachine that can boot: every device, volume and
// the cloud-init Secret are there, in the real cluster.
func TestBootableVMSpec(t *testing.T) {
	ctx := context.Background()
	iso := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "debian-12-netinst-iso", Namespace: "default", Annotations: map[string]string{"pve.caddy-proxmox.io/iso-file": "debian-12-netinst.iso"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("658Mi")}},
		},
	}
	if _, err := env.Kube.CoreV1().PersistentVolumeClaims("default").Create(ctx, iso, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, iso.Name, metav1.DeleteOptions{})
	})
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	var upid string
	// The informer may need a moment to see the new claim.
	for i := 0; ; i++ {
		ans := a.Do("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "bootable", "cores", "2", "memory", "2048",
			"scsi0", "local-path:16,iothread=1", "ide2", "local:iso/debian-12-netinst.iso,media=cdrom", "ide0", "local-path:cloudinit",
			"net0", "virtio,bridge=vmbr0", "boot", "order=ide2;scsi0;net0", "ciuser", "debian", "cipassword", "hunter2",
			"sshkeys", "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIBootable%20ops%40lab", "ipconfig0", "ip=10.10.0.5/24,gw=10.10.0.1",
			"nameserver", "10.10.0.1", "agent", "1"))
		if ans.Code == 200 {
			_ = jsonString(ans.Data, &upid)
			break
		}
		if i == 20 || !strings.Contains(string(ans.Raw), "does not exist") {
			t.Fatalf("create: %s %s", ans.Status, ans.Raw)
		}
		waitABit()
	}
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create: %s", exit)
	}
	vm := vmByID(t, id)
	spec := vm.Spec.Template.Spec
	byName := map[string]kubevirtv1.Disk{}
	for _, d := range spec.Domain.Devices.Disks {
		byName[d.Name] = d
	}
	vols := map[string]kubevirtv1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	if d := byName["scsi0"]; d.Disk == nil || d.Disk.Bus != kubevirtv1.DiskBusSCSI || d.BootOrder == nil || *d.BootOrder != 2 || vols["scsi0"].DataVolume == nil {
		t.Fatalf("root disk %+v %+v", d, vols["scsi0"])
	}
	if d := byName["ide2"]; d.CDRom == nil || d.BootOrder == nil || *d.BootOrder != 1 || vols["ide2"].PersistentVolumeClaim == nil || vols["ide2"].PersistentVolumeClaim.ClaimName != "debian-12-netinst-iso" {
		t.Fatalf("install CD-ROM %+v %+v", d, vols["ide2"])
	}
	if d := byName["ide0"]; d.CDRom == nil || vols["ide0"].CloudInitNoCloud == nil || vols["ide0"].CloudInitNoCloud.UserDataSecretRef.Name != translate.CloudInitSecretName(mustAtoi(id)) {
		t.Fatalf("cloud-init drive %+v %+v", d, vols["ide0"])
	}
	if len(spec.Domain.Devices.Interfaces) != 1 || spec.Domain.Devices.Interfaces[0].Masquerade == nil || len(spec.Networks) != 1 || spec.Networks[0].Pod == nil {
		t.Fatalf("NIC %+v %+v", spec.Domain.Devices.Interfaces, spec.Networks)
	}
	if len(vm.Spec.DataVolumeTemplates) != 1 || translate.DataVolumeSize(vm.Spec.DataVolumeTemplates[0]) != 16<<30 {
		t.Fatalf("data volumes %+v", vm.Spec.DataVolumeTemplates)
	}
	secret, err := env.Kube.CoreV1().Secrets(vm.Namespace).Get(ctx, translate.CloudInitSecretName(mustAtoi(id)), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user, network := string(secret.Data["userdata"]), string(secret.Data["networkdata"])
	if !strings.Contains(user, `user: "debian"`) || !strings.Contains(user, `password: "hunter2"`) || !strings.Contains(user, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBootable ops@lab") {
		t.Fatalf("user-data:\n%s", user)
	}
	if !strings.Contains(network, `addresses: ["10.10.0.5/24"]`) || !strings.Contains(network, strings.ToLower(spec.Domain.Devices.Interfaces[0].MacAddress)) {
		t.Fatalf("network-config:\n%s", network)
	}
	if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != vm.UID {
		t.Fatal("the cloud-init Secret must be owned by the VM")
	}
	if strings.Contains(vm.Annotations[translate.AnnotationConfig], "hunter2") {
		t.Fatal("the password leaked into the VM object")
	}
	var cfg map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil, &cfg)
	if cfg["ide2"] != "local:iso/debian-12-netinst.iso,media=cdrom,size=658M" || cfg["cipassword"] != "**********" {
		t.Fatalf("config %v", cfg)
	}
	// local-path cannot grow volumes: once the claim exists, a resize is
	// refused up front rather than failing in a task.
	claim := "vm-" + id + "-disk-0"
	for i := 0; i < 50; i++ {
		if _, err := env.Kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{}); err == nil {
			break
		}
		waitABit()
	}
	for i := 0; ; i++ {
		ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/resize", form("disk", "scsi0", "size", "+1G"))
		if ans.Code == 400 && strings.Contains(ans.Errors["disk"], "cannot grow volumes") {
			break
		}
		if ans.Code != 200 || i == 20 {
			t.Fatalf("resize on local-path: %s %s", ans.Status, ans.Raw)
		}
		// The informer had not seen the claim yet: the template grew, the
		// task did nothing. Try again now that it has.
		var u string
		_ = jsonString(ans.Data, &u)
		a.WaitTask(u)
		waitABit()
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	a.WaitTask(upid)
}
