package integration

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
)

// The types below mirror the bpg provider's (proxmox/nodes/vms/vms_types.go,
// proxmox/types/common_types.go, nodes/tasks/tasks_types.go): decoding
// fails, or reads the wrong value, exactly where bpg would.

// bpgBool is bpg's CustomBool: only the raw bytes 1 or true are true; a
// JSON string "1" reads as false.
type bpgBool bool

func (b *bpgBool) UnmarshalJSON(raw []byte) error {
	*b = bpgBool(string(raw) == "1" || string(raw) == "true")
	return nil
}

// bpgInt64 is CustomInt64: a number or a numeric string.
type bpgInt64 int64

func (i *bpgInt64) UnmarshalJSON(raw []byte) error {
	s := strings.Trim(string(raw), `"`)
	n, err := strconv.ParseInt(s, 10, 64)
	*i = bpgInt64(n)
	return err
}

type bpgStatus struct {
	Agent   *bpgBool `json:"agent"`
	CPUs    *int     `json:"cpus"`
	Lock    *string  `json:"lock"`
	MaxDisk *int64   `json:"maxdisk"`
	MaxMem  *int64   `json:"maxmem"`
	Name    *string  `json:"name"`
	PID     *int     `json:"pid"`
	Status  string   `json:"status"`
	Tags    *string  `json:"tags"`
	Uptime  *int     `json:"uptime"`
	VMID    *int     `json:"vmid"`
}

type bpgConfig struct {
	ACPI        *bpgBool  `json:"acpi"`
	Agent       *string   `json:"agent"`
	Boot        *string   `json:"boot"`
	Cores       *int64    `json:"cores"`
	CPU         *string   `json:"cpu"`
	Description *string   `json:"description"`
	Memory      *bpgInt64 `json:"memory"`
	Name        *string   `json:"name"`
	OnBoot      *bpgBool  `json:"onboot"`
	OSType      *string   `json:"ostype"`
	Sockets     *int64    `json:"sockets"`
	Tablet      *bpgBool  `json:"tablet"`
	Tags        *string   `json:"tags"`
	Template    *bpgBool  `json:"template"`
	Digest      string    `json:"digest"`
}

type bpgTask struct {
	PID        int    `json:"pid"`
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus"`
}

type bpgResource struct {
	VMID     int     `json:"vmid"`
	Node     string  `json:"node"`
	Type     string  `json:"type"`
	CPU      float64 `json:"cpu"`
	MaxCPU   float64 `json:"maxcpu"`
	Mem      int64   `json:"mem"`
	Template *int    `json:"template"`
	Name     string  `json:"name"`
}

// bpgWait is WaitForTask: 400 is retried, success iff exitstatus OK.
func bpgWait(a *testcaddy.PVE, upid string) {
	a.T.Helper()
	parts := strings.Split(upid, ":")
	if len(parts) < 8 {
		a.T.Fatalf("UPID %q", upid)
	}
	for _, f := range parts[2:5] {
		if _, err := strconv.ParseUint(f, 16, 64); err != nil {
			a.T.Fatalf("UPID %q: field %q is not hex", upid, f)
		}
	}
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ans := a.Do("GET", "/nodes/"+parts[1]+"/tasks/"+upid+"/status", nil)
		if ans.Code == 400 {
			continue
		}
		var st bpgTask
		if err := json.Unmarshal(ans.Data, &st); err != nil {
			a.T.Fatalf("task status %s: %v", ans.Data, err)
		}
		if st.Status != "running" {
			if st.ExitStatus != "OK" {
				a.T.Fatalf("task %s: %q", upid, st.ExitStatus)
			}
			return
		}
	}
	a.T.Fatalf("task %s did not end", upid)
}

func decodeStrict(t *testing.T, raw json.RawMessage, into any) {
	t.Helper()
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatalf("decoding %s into %T: %v", raw, into, err)
	}
}

// configStrings checks bpg's hard requirement: device values are strings
// (vms_types.go type-asserts value.(string) and panics otherwise).
func configStrings(t *testing.T, raw json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	decodeStrict(t, raw, &m)
	for k, v := range m {
		if strings.HasPrefix(k, "scsi") || strings.HasPrefix(k, "ide") || strings.HasPrefix(k, "sata") || strings.HasPrefix(k, "virtio") ||
			strings.HasPrefix(k, "net") || strings.HasPrefix(k, "ipconfig") || strings.HasPrefix(k, "unused") {
			if len(v) == 0 || v[0] != '"' {
				t.Fatalf("config %s must be a JSON string, got %s", k, v)
			}
		}
	}
	return m
}

// TestBPGSequence replays the bpg provider's create (A), read (C), update
// (D), power (E), clone (B) and delete (F) calls and decodes every answer
// with bpg's own field types.
func TestBPGSequence(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)

	// A. create, everything in one form, as bpg sends it.
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form(
		"vmid", id, "name", "bpg-vm", "acpi", "1", "agent", "enabled=1,fstrim_cloned_disks=0,type=virtio",
		"bios", "seabios", "boot", "order=scsi0;net0", "cores", "2", "sockets", "1", "cpu", "cputype=x86-64-v2-AES",
		"memory", "2048", "balloon", "0", "onboot", "1", "tablet", "1", "template", "0", "keyboard", "en-us",
		"ostype", "l26", "scsihw", "virtio-scsi-single", "vga", "std", "tags", "terraform;test", "description", "made by bpg",
		"net0", "model=virtio,bridge=vmbr0,firewall=0", "scsi0", "file=ceph-block:8,format=raw,size=8589934592,iothread=1",
		"ide2", "file=local-path:cloudinit", "ciuser", "ops", "ipconfig0", "ip=dhcp", "protection", "0",
	), &upid)
	bpgWait(a, upid)

	// The guest image runs qemu-guest-agent (agent enabled=1): the
	// stand-in's guest reports it shortly after it boots.
	vm := vmByID(t, id)

	// A5: start, then poll status until running.
	var st bpgStatus
	decodeStrict(t, a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/status/current", nil).Data, &st)
	if st.Status != "stopped" || st.Lock != nil || st.PID != nil || st.Agent == nil || !bool(*st.Agent) {
		t.Fatalf("status after create %+v", st)
	}
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/start", form("timeout", "300"), &upid)
	bpgWait(a, upid)
	decodeStrict(t, a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/status/current", nil).Data, &st)
	if st.Status != "running" || st.PID == nil || *st.VMID != mustAtoi(id) || *st.CPUs != 2 || *st.MaxMem != 2<<30 {
		t.Fatalf("status running %+v", st)
	}

	// C. read: resources → config → status → pools → agent.
	var rows []bpgResource
	decodeStrict(t, a.Do("GET", "/cluster/resources", form("type", "vm")).Data, &rows)
	found := false
	for _, r := range rows {
		if r.VMID == mustAtoi(id) {
			found = r.Node == node && r.Type == "qemu" && r.Template != nil && *r.Template == 0 && r.MaxCPU == 2
		}
	}
	if !found {
		t.Fatalf("resources row for %s wrong or missing", id)
	}
	raw := a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/config", nil).Data
	m := configStrings(t, raw)
	var cfg bpgConfig
	decodeStrict(t, raw, &cfg)
	if *cfg.Agent != "1,fstrim_cloned_disks=0,type=virtio" || *cfg.Cores != 2 || *cfg.Memory != 2048 || !bool(*cfg.OnBoot) ||
		!bool(*cfg.Tablet) || *cfg.Tags != "terraform;test" || *cfg.Boot != "order=scsi0;net0" || *cfg.CPU != "x86-64-v2-AES" || cfg.Template != nil {
		t.Fatalf("config %s", raw)
	}
	if s := string(m["scsi0"]); !strings.Contains(s, "ceph-block:vm-"+id+"-disk-0") || !strings.Contains(s, "size=8G") || !strings.Contains(s, "format=raw") {
		t.Fatalf("scsi0 %s", s)
	}
	if s := string(m["ide2"]); !strings.Contains(s, "vm-"+id+"-cloudinit") || !strings.Contains(s, "media=cdrom") {
		t.Fatalf("ide2 must be recognisable as the cloud-init drive: %s", s)
	}
	var pools []map[string]any
	decodeStrict(t, a.Do("GET", "/pools", nil).Data, &pools)
	var ifaces struct {
		Result []struct {
			Name string `json:"name"`
			IPs  []struct {
				Addr   string `json:"ip-address"`
				Type   string `json:"ip-address-type"`
				Prefix int    `json:"prefix"`
			} `json:"ip-addresses"`
		} `json:"result"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ans := a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/agent/network-get-interfaces", nil)
		if ans.Code == 200 {
			decodeStrict(t, ans.Data, &ifaces)
			break
		}
		if ans.Code != 500 || !strings.Contains(ans.Message, "QEMU guest agent is not running") || time.Now().After(deadline) {
			t.Fatalf("agent: %s %s", ans.Status, ans.Raw)
		}
		time.Sleep(200 * time.Millisecond)
	}
	global := false
	for _, i := range ifaces.Result {
		for _, ip := range i.IPs {
			global = global || (i.Name != "lo" && ip.Type == "ipv4" && !strings.HasPrefix(ip.Addr, "127."))
		}
	}
	if !global {
		t.Fatalf("no global IPv4 from the agent: %+v", ifaces)
	}

	// D. update: sync PUT with delete=, expects data null; then reboot.
	ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+id+"/config", form("cores", "4", "description", "updated", "delete", "keyboard", "digest", cfg.Digest))
	if ans.Code != 200 || string(ans.Data) != "null" {
		t.Fatalf("PUT config: %s %s", ans.Status, ans.Raw)
	}
	var pending []map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+id+"/pending", nil, &pending)
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/reboot", form("timeout", "300"), &upid)
	bpgWait(a, upid)
	decodeStrict(t, a.Do("GET", "/nodes/"+node+"/qemu/"+id+"/status/current", nil).Data, &st)
	if st.Status != "running" || *st.CPUs != 4 {
		t.Fatalf("after update+reboot %+v", st)
	}
	a.OK("PUT", "/nodes/"+node+"/qemu/"+id+"/resize", form("disk", "scsi0", "size", "+2G"), &upid)
	bpgWait(a, upid)
	if pvc, err := env.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace).Get(context.Background(), "vm-"+id+"-disk-0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.Value() != 10<<30 {
		t.Fatalf("PVC not grown: %s", q.String())
	}

	// E. power: shutdown with forceStop.
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/status/shutdown", form("forceStop", "1", "timeout", "30"), &upid)
	bpgWait(a, upid)

	// B. clone: nextid → clone → wait → poll until unlocked → PUT config.
	cloneID := nextID(a)
	a.OK("POST", "/nodes/"+node+"/qemu/"+id+"/clone", form("newid", cloneID, "full", "1", "name", "bpg-clone", "target", node), &upid)
	bpgWait(a, upid)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		decodeStrict(t, a.Do("GET", "/nodes/"+node+"/qemu/"+cloneID+"/status/current", nil).Data, &st)
		if st.Lock == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("clone stays locked: %s", *st.Lock)
		}
	}
	if ans := a.Do("PUT", "/nodes/"+node+"/qemu/"+cloneID+"/config", form("memory", "1024")); ans.Code != 200 {
		t.Fatalf("PUT clone config: %s %s", ans.Status, ans.Raw)
	}

	// F. delete both: stopped → DELETE purge → wait → status/current errors.
	for _, vmid := range []string{cloneID, id} {
		a.OK("DELETE", "/nodes/"+node+"/qemu/"+vmid, form("destroy-unreferenced-disks", "1", "purge", "1"), &upid)
		bpgWait(a, upid)
		ans := a.Do("GET", "/nodes/"+node+"/qemu/"+vmid+"/status/current", nil)
		if ans.Code != 500 || !strings.Contains(ans.Message, "does not exist") {
			t.Fatalf("status after delete of %s: %s", vmid, ans.Status)
		}
	}
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
