package lxc

import (
	"net"
	"testing"
	"time"
)

func TestBroadcastAddr(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "255.255.255.255:9",
		"192.168.1.255":      "192.168.1.255:9",
		"192.168.1.255:7":    "192.168.1.255:7",
		"255.255.255.255:40": "255.255.255.255:40",
	} {
		a, err := broadcastAddr(in)
		if err != nil || a.String() != want {
			t.Errorf("%q: %v %v", in, a, err)
		}
	}
	for _, bad := range []string{"host.example", "fe80::1", "[::1]:9", "10.0.0.255:0", "10.0.0.255:x"} {
		if _, err := broadcastAddr(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMagicPacket(t *testing.T) {
	hw, _ := net.ParseMAC("aa:bb:cc:dd:ee:ff")
	p := magicPacket(hw)
	if len(p) != 102 || p[0] != 0xff || p[5] != 0xff || p[6] != 0xaa || p[101] != 0xff || p[96] != 0xaa {
		t.Fatalf("packet % x", p)
	}
}

func TestNodeWakeValidate(t *testing.T) {
	ok := &NodeWake{JoinTimeout: time.Minute, MACs: map[string]NodeMAC{"pve2": {MAC: "AA:BB:CC:DD:EE:FF", Broadcast: "10.0.0.255"}}}
	if err := ok.validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*NodeWake{
		{JoinTimeout: -1},
		{MACs: map[string]NodeMAC{"pve2": {MAC: "aa:bb"}}},
		{MACs: map[string]NodeMAC{"pve2": {MAC: "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01"}}},
		{MACs: map[string]NodeMAC{"": {MAC: "aa:bb:cc:dd:ee:ff"}}},
		{MACs: map[string]NodeMAC{"pve2": {MAC: "aa:bb:cc:dd:ee:ff", Broadcast: "lan"}}},
	} {
		if bad.validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if a, b := (&NodeWake{MACs: map[string]NodeMAC{"a": {MAC: "x"}, "b": {MAC: "y"}}}).String(), (&NodeWake{MACs: map[string]NodeMAC{"b": {MAC: "y"}, "a": {MAC: "x"}}}).String(); a != b {
		t.Fatalf("unstable key %q %q", a, b)
	}
}
