package lxc

import (
	"net"
	"strings"
	"testing"
	"time"
)

// The wake configuration comes from the Caddyfile (trusted, but typed by
// people) and guest configs from the Proxmox API; none of it may panic.

func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"09:00-18:00", "Mon-Fri 09:00-18:00", "Sat,Sun 10:00-12:00", "22:00-02:00", "24:00-25:61", "Fri-Mon 00:00-00:00", "Mon-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWindow(s)
		if err != nil {
			return
		}
		if w.String() != s {
			t.Fatalf("String() = %q, want %q", w.String(), s)
		}
		for h := 0; h < 24*7; h += 5 {
			_ = w.Contains(time.Date(2025, 1, 6, 0, 0, 0, 0, time.UTC).Add(time.Duration(h) * time.Hour))
		}
	})
}

func FuzzValidateRef(f *testing.F) {
	for _, s := range []string{"100", "web", "99", "1000000000", "a b", "-1", "+100", "0x64", "１００"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		if ValidateRef(ref) != nil {
			return
		}
		if ref == "" || strings.ContainsAny(ref, "/ \t") {
			t.Fatalf("accepted %q", ref)
		}
	})
}

func FuzzConfigMACs(f *testing.F) {
	f.Add("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp", "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0")
	f.Add("name=eth0,ip=10.0.0.5/24,hwaddr=zz", "")
	f.Add(",,,=,hwaddr=", "e1000=00:00:00:00:00:00:00")
	f.Fuzz(func(t *testing.T, net0, net1 string) {
		nc := parseNetConfig(map[string]any{"net0": net0, "net1": net1, "ipconfig1": net0, "net": 7, "netx": "hwaddr=BC:24:11:00:00:02"})
		if len(nc.ifaces) != 2 {
			t.Fatalf("%d interfaces from net0, net1", len(nc.ifaces))
		}
		for _, m := range nc.macs() {
			if _, err := net.ParseMAC(m); err != nil || m != strings.ToLower(m) {
				t.Fatalf("MAC %q from %q %q", m, net0, net1)
			}
		}
		for _, ifc := range nc.ifaces {
			for _, ip := range ifc.static {
				if !usable(ip) {
					t.Fatalf("IP %q from %q %q", ip, net0, net1)
				}
			}
		}
		// Only the config's own interfaces give addresses.
		if a := pick(nc, []candidate{{mac: "02:42:ac:11:00:01", name: "docker0", ip: "172.17.0.1"}}); a != "" {
			for _, ifc := range nc.ifaces {
				if ifc.name == "docker0" || ifc.mac == "02:42:ac:11:00:01" {
					return
				}
			}
			t.Fatalf("picked %s of an unconfigured interface (%q %q)", a, net0, net1)
		}
	})
}

// FuzzNextWakeStep checks the wake's decisions against PVE's rules for
// any status/current: nothing is posted that PVE or HA would refuse or
// ignore, and every wait or failure says why.
func FuzzNextWakeStep(f *testing.F) {
	f.Add("lxc", "stopped", "", "backup", false, "", false, false)
	f.Add("qemu", "running", "prelaunch", "backup", false, "", false, false)
	f.Add("lxc", "stopped", "", "", true, "error", false, false)
	f.Add("qemu", "stopped", "stopped", "suspended", true, "stopped", true, false)
	f.Fuzz(func(t *testing.T, kind, status, qmp, lock string, managed bool, hastate string, requested, template bool) {
		st := guestStatus{Status: status, QMPStatus: qmp, Lock: lock, Template: pveBool(template), HA: haStatus{Managed: pveBool(managed), State: hastate}}
		s := nextWakeStep(kind, st, requested)
		posts := s.action == actStart || s.action == actResume
		switch {
		case template && s.action != actFail:
			t.Fatalf("template: %+v", s)
		case s.action == actStart && status == "running":
			t.Fatalf("start of a running guest: %+v", s)
		case s.action == actStart && lock != "" && !startsDespiteLock(kind, lock):
			t.Fatalf("start under lock %q: %+v", lock, s)
		case s.action == actResume && lock != "" && lock != "backup":
			t.Fatalf("resume under lock %q", lock)
		case posts && managed && hastate != "" && hastate != "stopped" && hastate != "disabled" && hastate != "started":
			t.Fatalf("request while HA is %s: %+v", hastate, s)
		case (s.action == actWait || s.action == actFail) && (s.public == "" || s.detail == ""):
			t.Fatalf("no words: %+v", s)
		case s.action == actUp && (status != "running" || st.paused()):
			t.Fatalf("up while %s/%s", status, qmp)
		}
	})
}
