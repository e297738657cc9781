package translate

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
)

// IPConfig is a parsed ipconfigN value.
type IPConfig struct {
	IP, GW, IP6, GW6 string
}

// ParseIPConfig parses "ip=dhcp|<cidr>,gw=<ip>,ip6=dhcp|auto|<cidr>,gw6=<ip>"
// with PVE's checks and words.
func ParseIPConfig(s string) (IPConfig, error) {
	var c IPConfig
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return c, fmt.Errorf("invalid format - format error: '%s' is not a key=value pair", part)
		}
		switch k {
		case "ip":
			if v != "dhcp" {
				if ip, _, err := net.ParseCIDR(v); err != nil || ip.To4() == nil {
					return c, fmt.Errorf("invalid format - ip: value does not look like a valid IPv4 network configuration")
				}
			}
			c.IP = v
		case "gw":
			if ip := net.ParseIP(v); ip == nil || ip.To4() == nil {
				return c, fmt.Errorf("invalid format - gw: value does not look like a valid IPv4 address")
			}
			c.GW = v
		case "ip6":
			if v != "dhcp" && v != "auto" {
				if ip, _, err := net.ParseCIDR(v); err != nil || ip.To4() != nil {
					return c, fmt.Errorf("invalid format - ip6: value does not look like a valid IPv6 network configuration")
				}
			}
			c.IP6 = v
		case "gw6":
			if ip := net.ParseIP(v); ip == nil || ip.To4() != nil {
				return c, fmt.Errorf("invalid format - gw6: value does not look like a valid IPv6 address")
			}
			c.GW6 = v
		default:
			return c, fmt.Errorf("invalid format - property '%s' is not allowed in ipconfig", k)
		}
	}
	if c.GW != "" && (c.IP == "" || c.IP == "dhcp") {
		return c, fmt.Errorf("invalid format - gw: a gateway needs a static ip")
	}
	if c.GW6 != "" && (c.IP6 == "" || c.IP6 == "dhcp" || c.IP6 == "auto") {
		return c, fmt.Errorf("invalid format - gw6: a gateway needs a static ip6")
	}
	return c, nil
}

// String prints the canonical ipconfig value.
func (c IPConfig) String() string {
	var parts []string
	for _, kv := range [][2]string{{"gw", c.GW}, {"gw6", c.GW6}, {"ip", c.IP}, {"ip6", c.IP6}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, ",")
}

// SSHKeys decodes PVE's sshkeys value: URL-encoded, one key per line.
func SSHKeys(v string) ([]string, error) {
	dec, err := url.PathUnescape(v)
	if err != nil {
		return nil, fmt.Errorf("invalid urlencoded string: %s", v)
	}
	var keys []string
	for _, l := range strings.Split(dec, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		// A control byte inside a key (a CR from a pasted "\r\n" is trimmed
		// above) would split its authorized_keys line.
		ctl := strings.IndexFunc(l, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) >= 0
		if ctl || len(f) < 2 || !(strings.HasPrefix(f[0], "ssh-") || strings.HasPrefix(f[0], "ecdsa-") || strings.HasPrefix(f[0], "sk-")) {
			return nil, fmt.Errorf("invalid format - invalid SSH public key: %s", truncate(l, 40))
		}
		keys = append(keys, l)
	}
	return keys, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// CloudInit renders NoCloud user-data and a network-config (v2) from the
// PVE keys ciuser, cipassword, sshkeys, ipconfigN, nameserver,
// searchdomain and name. macs maps netN to the NIC's MAC, because guest
// interface names are unknown: each ipconfigN matches its netN by MAC.
func CloudInit(cfg map[string]string, password string, macs map[string]string) (userData, networkData string, err error) {
	var u strings.Builder
	u.WriteString("#cloud-config\n")
	if n := cfg["name"]; n != "" {
		fmt.Fprintf(&u, "hostname: %s\nmanage_etc_hosts: true\n", yamlString(strings.SplitN(n, ".", 2)[0]))
		if strings.Contains(n, ".") {
			fmt.Fprintf(&u, "fqdn: %s\n", yamlString(n))
		}
	}
	if user := cfg["ciuser"]; user != "" {
		fmt.Fprintf(&u, "user: %s\n", yamlString(user))
	}
	if password != "" {
		fmt.Fprintf(&u, "password: %s\nchpasswd:\n  expire: false\nssh_pwauth: true\n", yamlString(password))
	}
	if v := cfg["sshkeys"]; v != "" {
		keys, err := SSHKeys(v)
		if err != nil {
			return "", "", err
		}
		u.WriteString("ssh_authorized_keys:\n")
		for _, k := range keys {
			fmt.Fprintf(&u, "  - %s\n", yamlString(k))
		}
	}
	if cfg["ciupgrade"] == "1" {
		u.WriteString("package_upgrade: true\n")
	}

	var n strings.Builder
	n.WriteString("version: 2\nethernets:\n")
	var keys []string
	for k := range cfg {
		if strings.HasPrefix(k, "ipconfig") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	count := 0
	for _, k := range keys {
		c, err := ParseIPConfig(cfg[k])
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", k, err)
		}
		nic := "net" + strings.TrimPrefix(k, "ipconfig")
		mac, ok := macs[nic]
		if !ok {
			continue // PVE ignores ipconfigN without a netN
		}
		count++
		fmt.Fprintf(&n, "  %s:\n    match:\n      macaddress: %s\n", nic, yamlString(strings.ToLower(mac)))
		var addrs []string
		if c.IP == "dhcp" {
			n.WriteString("    dhcp4: true\n")
		} else if c.IP != "" {
			addrs = append(addrs, c.IP)
		}
		switch c.IP6 {
		case "dhcp":
			n.WriteString("    dhcp6: true\n")
		case "auto":
			n.WriteString("    accept-ra: true\n")
		case "":
		default:
			addrs = append(addrs, c.IP6)
		}
		if len(addrs) > 0 {
			fmt.Fprintf(&n, "    addresses: [%s]\n", strings.Join(quoteAll(addrs), ", "))
		}
		var routes []string
		if c.GW != "" {
			routes = append(routes, fmt.Sprintf("{to: default, via: %s}", yamlString(c.GW)))
		}
		if c.GW6 != "" {
			routes = append(routes, fmt.Sprintf("{to: '::/0', via: %s}", yamlString(c.GW6)))
		}
		if len(routes) > 0 {
			fmt.Fprintf(&n, "    routes: [%s]\n", strings.Join(routes, ", "))
		}
		if ns, sd := strings.Fields(cfg["nameserver"]), strings.Fields(cfg["searchdomain"]); len(ns)+len(sd) > 0 {
			n.WriteString("    nameservers:\n")
			if len(ns) > 0 {
				fmt.Fprintf(&n, "      addresses: [%s]\n", strings.Join(quoteAll(ns), ", "))
			}
			if len(sd) > 0 {
				fmt.Fprintf(&n, "      search: [%s]\n", strings.Join(quoteAll(sd), ", "))
			}
		}
	}
	if count == 0 {
		return u.String(), "", nil
	}
	return u.String(), n.String(), nil
}

// yamlString quotes s as a YAML double-quoted scalar, so that no client
// value can inject YAML structure.
func yamlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func quoteAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = yamlString(s)
	}
	return out
}

// cloudInitOptions are the keys GET …/cloudinit lists when they are set:
// PVE's $cloudinitoptions (ipconfigN, name and netN show there only as
// pending additions or deletions, which never happen here).
var cloudInitOptions = []string{"cicustom", "cipassword", "citype", "ciuser", "ciupgrade", "nameserver", "searchdomain", "sshkeys"}

// CloudInitView is GET …/cloudinit: each cloud-init option the config sets
// (PVE skips false values, so ciupgrade=0 and empty strings too) with the
// value the drive was generated from, typed as GET …/config types it and
// the password masked. A config change rewrites the drive's Secret in the
// same call, so no row is ever pending or deleted.
func CloudInitView(vm *kubevirtv1.VirtualMachine) []PendingEntry {
	cfg, _ := configStrings(vm, nil) // no disk sizes needed
	view := typedConfig(cfg)         // no digest either
	out := []PendingEntry{}
	for _, k := range cloudInitOptions {
		v, ok := view[k]
		if !ok {
			continue
		}
		if s := fmt.Sprint(v); s == "" || s == "0" {
			continue
		}
		if k == "cipassword" {
			v = MaskedPassword
		}
		out = append(out, PendingEntry{Key: k, Value: v})
	}
	return out
}

// CloudInitDrive tells whether the VM has a cloud-init drive, and whether
// it is a ConfigDrive (citype=configdrive2) rather than NoCloud.
func CloudInitDrive(vm *kubevirtv1.VirtualMachine) (has, configDrive bool) {
	if vm.Spec.Template == nil {
		return false, false
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		switch {
		case v.CloudInitConfigDrive != nil:
			return true, true
		case v.CloudInitNoCloud != nil:
			return true, false
		}
	}
	return false, false
}

// CloudInitSource is where the VM's cloud-init drive takes its data from:
// the Secret it names (this API's drives name vm-<vmid>-cloudinit), or,
// for a VM made elsewhere, the user and network data written inline.
func CloudInitSource(vm *kubevirtv1.VirtualMachine) (secret, user, network string) {
	if vm.Spec.Template == nil {
		return "", "", ""
	}
	inline := func(raw, b64 string) string {
		if raw != "" || b64 == "" {
			return raw
		}
		dec, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return ""
		}
		return string(dec)
	}
	for _, v := range vm.Spec.Template.Spec.Volumes {
		var ud, nd *corev1.LocalObjectReference
		switch {
		case v.CloudInitNoCloud != nil:
			c := v.CloudInitNoCloud
			ud, nd, user, network = c.UserDataSecretRef, c.NetworkDataSecretRef, inline(c.UserData, c.UserDataBase64), inline(c.NetworkData, c.NetworkDataBase64)
		case v.CloudInitConfigDrive != nil:
			c := v.CloudInitConfigDrive
			ud, nd, user, network = c.UserDataSecretRef, c.NetworkDataSecretRef, inline(c.UserData, c.UserDataBase64), inline(c.NetworkData, c.NetworkDataBase64)
		default:
			continue
		}
		switch {
		case ud != nil:
			secret = ud.Name
		case nd != nil:
			secret = nd.Name
		}
		return secret, user, network
	}
	return "", "", ""
}

// firmwareUUIDNamespace is the UUIDv5 namespace KubeVirt derives a VM's
// firmware UUID from when the VM names none (CalculateLegacyUUID).
var firmwareUUIDNamespace = uuid.MustParse("6a1a24a1-4061-4607-8bf4-a3963d0c5895")

// FirmwareUUID is the SMBIOS UUID KubeVirt gives the VM's guest: the
// template's firmware.uuid, else the one KubeVirt derives from the name.
func FirmwareUUID(vm *kubevirtv1.VirtualMachine) string {
	if t := vm.Spec.Template; t != nil && t.Spec.Domain.Firmware != nil && t.Spec.Domain.Firmware.UUID != "" {
		return string(t.Spec.Domain.Firmware.UUID)
	}
	return uuid.NewSHA1(firmwareUUIDNamespace, []byte(vm.Name)).String()
}

// CloudInitMetaData is the meta-data KubeVirt writes next to the user and
// network data when it builds the drive: for NoCloud the instance-id is
// the firmware UUID, for ConfigDrive it is <name>.<namespace> with the UUID
// beside it; the hostname is the template's, else the name's first label
// (at most 63 characters). Both are JSON, as KubeVirt writes them.
func CloudInitMetaData(vm *kubevirtv1.VirtualMachine) string {
	hostname := strings.SplitN(vm.Name, ".", 2)[0]
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	if t := vm.Spec.Template; t != nil && t.Spec.Hostname != "" {
		hostname = t.Spec.Hostname
	}
	has, configDrive := CloudInitDrive(vm)
	if !has {
		configDrive = StoredConfig(vm)["citype"] == "configdrive2"
	}
	var buf []byte
	if configDrive {
		buf, _ = json.Marshal(struct {
			InstanceID string `json:"instance_id"`
			Hostname   string `json:"hostname,omitempty"`
			UUID       string `json:"uuid,omitempty"`
		}{vm.Name + "." + vm.Namespace, hostname, FirmwareUUID(vm)})
	} else {
		buf, _ = json.Marshal(struct {
			InstanceID    string `json:"instance-id"`
			LocalHostname string `json:"local-hostname,omitempty"`
		}{FirmwareUUID(vm), hostname})
	}
	return string(buf)
}
