package api

import (
	"encoding/json"
	"testing"

	kubevirtv1 "kubevirt.io/api/core/v1"
)

// guestInterfaces lists what the guest agent reports, as PVE's passthrough
// of qemu-ga does: guest-only bridges by their guest names, no made-up
// names for NICs the agent did not report, no hardware-address where the
// guest has none.
func TestGuestInterfaces(t *testing.T) {
	status := []kubevirtv1.VirtualMachineInstanceNetworkInterface{
		{Name: "net0", InterfaceName: "enp1s0", MAC: "BC:24:11:00:00:01", IP: "10.244.0.7", IPs: []string{"10.244.0.7"}},
		{Name: "net1", MAC: "bc:24:11:00:00:02"}, // not reported by the agent
		{InterfaceName: "docker0", MAC: "02:42:ac:11:00:01", IP: "172.17.0.1", IPs: []string{"172.17.0.1", "fd00::1"}},
		{InterfaceName: "wg0", IPs: []string{"10.99.0.1"}},
	}
	b, _ := json.Marshal(guestInterfaces(status))
	want := `[{"hardware-address":"00:00:00:00:00:00","ip-addresses":[{"ip-address":"127.0.0.1","ip-address-type":"ipv4","prefix":8},{"ip-address":"::1","ip-address-type":"ipv6","prefix":128}],"name":"lo"},` +
		`{"hardware-address":"bc:24:11:00:00:01","ip-addresses":[{"ip-address":"10.244.0.7","ip-address-type":"ipv4","prefix":24}],"name":"enp1s0"},` +
		`{"hardware-address":"02:42:ac:11:00:01","ip-addresses":[{"ip-address":"172.17.0.1","ip-address-type":"ipv4","prefix":24},{"ip-address":"fd00::1","ip-address-type":"ipv6","prefix":64}],"name":"docker0"},` +
		`{"ip-addresses":[{"ip-address":"10.99.0.1","ip-address-type":"ipv4","prefix":24}],"name":"wg0"}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}
