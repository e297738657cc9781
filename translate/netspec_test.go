package translate

import (
	"errors"
	"reflect"
	"testing"
)

func ptrBool(b bool) *bool { return &b }
func ptrInt(i int) *int    { return &i }

func TestParseNetSpec(t *testing.T) {
	const mac = "BC:24:11:AA:BB:CC"
	tests := []struct {
		in      string
		want    NetSpec
		wantStr string // canonical String(); "" means in itself
		wantErr string
	}{
		{in: "virtio", want: NetSpec{Model: "virtio"}},
		{in: "virtio,bridge=vmbr0", want: NetSpec{Model: "virtio", Bridge: "vmbr0"}},
		{in: "virtio=" + mac + ",bridge=vmbr0,firewall=1", want: NetSpec{Model: "virtio", MAC: mac, Bridge: "vmbr0", Firewall: ptrBool(true)}},
		{
			// bpg's form: explicit keys, every boolean sent
			in:      "model=virtio,bridge=vmbr0,firewall=0,link_down=0,macaddr=" + mac + ",queues=0,rate=1.000000,tag=10,mtu=1500,trunks=10;20-30",
			want:    NetSpec{Model: "virtio", MAC: mac, Bridge: "vmbr0", Firewall: ptrBool(false), LinkDown: ptrBool(false), MTU: ptrInt(1500), Queues: ptrInt(0), Rate: "1.000000", Tag: ptrInt(10), Trunks: "10;20-30"},
			wantStr: "virtio=" + mac + ",bridge=vmbr0,firewall=0,link_down=0,mtu=1500,queues=0,rate=1.000000,tag=10,trunks=10;20-30",
		},
		{in: "e1000=bc:24:11:aa:bb:cc", want: NetSpec{Model: "e1000", MAC: "bc:24:11:aa:bb:cc"}},
		{in: "bridge=vmbr1,e1000-82540em", want: NetSpec{Model: "e1000-82540em", Bridge: "vmbr1"}, wantStr: "e1000-82540em,bridge=vmbr1"},
		{in: "vmxnet3,link_down=yes,firewall=ON", want: NetSpec{Model: "vmxnet3", Firewall: ptrBool(true), LinkDown: ptrBool(true)}, wantStr: "vmxnet3,firewall=1,link_down=1"},
		{in: "virtio,firewall=false", want: NetSpec{Model: "virtio", Firewall: ptrBool(false)}, wantStr: "virtio,firewall=0"},
		{in: "virtio,,bridge=vmbr0, ", want: NetSpec{Model: "virtio", Bridge: "vmbr0"}, wantStr: "virtio,bridge=vmbr0"},
		{in: "virtio,tag=+05,queues=64,mtu=65520", want: NetSpec{Model: "virtio", Tag: ptrInt(5), Queues: ptrInt(64), MTU: ptrInt(65520)}, wantStr: "virtio,mtu=65520,queues=64,tag=5"},
		{in: "virtio,rate=0", want: NetSpec{Model: "virtio", Rate: "0"}},
		{in: "virtio,rate=-0", want: NetSpec{Model: "virtio", Rate: "-0"}},
		{in: "virtio,rate=1e3", want: NetSpec{Model: "virtio", Rate: "1e3"}},
		{in: "virtio,rate=.5", want: NetSpec{Model: "virtio", Rate: ".5"}},
		{in: "virtio,bridge=my_br.10-x", want: NetSpec{Model: "virtio", Bridge: "my_br.10-x"}},
		{in: "macaddr=" + mac + ",model=virtio", want: NetSpec{Model: "virtio", MAC: mac}, wantStr: "virtio=" + mac},

		{in: "", wantErr: "invalid format - model: property is missing and it is not optional"},
		{in: "bridge=vmbr0", wantErr: "invalid format - model: property is missing and it is not optional"},
		{in: "rtl", wantErr: "invalid format - model: value 'rtl' does not have a value in the enumeration 'e1000, e1000-82540em, e1000-82544gc, e1000-82545em, e1000e, i82551, i82557b, i82559er, ne2k_isa, ne2k_pci, pcnet, rtl8139, virtio, vmxnet3'"},
		{in: "model=VIRTIO", wantErr: "invalid format - model: value 'VIRTIO' does not have a value in the enumeration 'e1000, e1000-82540em, e1000-82544gc, e1000-82545em, e1000e, i82551, i82557b, i82559er, ne2k_isa, ne2k_pci, pcnet, rtl8139, virtio, vmxnet3'"},
		{in: "virtio,e1000", wantErr: "invalid format - duplicate key in comma-separated list property: model"},
		{in: "model=virtio,e1000", wantErr: "invalid format - duplicate key in comma-separated list property: model"},
		{in: "virtio,model=e1000", wantErr: "invalid format - duplicate key in comma-separated list property: model"},
		{in: "virtio=" + mac + ",virtio=" + mac, wantErr: "invalid format - key alias 'model' is already defined"},
		{in: "model=virtio,virtio=" + mac, wantErr: "invalid format - key alias 'model' is already defined"},
		{in: "macaddr=" + mac + ",virtio=" + mac, wantErr: "invalid format - key 'macaddr' is already defined (via alias)"},
		{in: "virtio=" + mac + ",macaddr=" + mac, wantErr: "invalid format - duplicate key in comma-separated list property: macaddr"},
		{in: "virtio,bridge=a,bridge=b", wantErr: "invalid format - duplicate key in comma-separated list property: bridge"},
		{in: "virtio,speed=10", wantErr: "invalid format - invalid key in comma-separated list property: speed"},
		{in: "virtio, bridge=vmbr0", wantErr: "invalid format - invalid key in comma-separated list property:  bridge"},
		{in: "virtio,host-tunnel=1", wantErr: "invalid format - invalid key in comma-separated list property: host-tunnel"},
		{in: "virtio,bridge=", wantErr: "invalid format - missing key in comma-separated list property"},
		{in: "virtio,=x", wantErr: "invalid format - missing key in comma-separated list property"},
		{in: "virtio=01:24:11:AA:BB:CC", wantErr: "invalid format - macaddr: value does not look like a valid unicast MAC address"},
		{in: "virtio=BC:24:11:AA:BB", wantErr: "invalid format - macaddr: value does not look like a valid unicast MAC address"},
		{in: "virtio=BC-24-11-AA-BB-CC", wantErr: "invalid format - macaddr: value does not look like a valid unicast MAC address"},
		{in: "virtio=BG:24:11:AA:BB:CC", wantErr: "invalid format - macaddr: value does not look like a valid unicast MAC address"},
		{in: "virtio,bridge=vm br0", wantErr: "invalid format - bridge: invalid bridge ID 'vm br0'"},
		{in: "virtio,bridge=vmbr0/1", wantErr: "invalid format - bridge: invalid bridge ID 'vmbr0/1'"},
		{in: "virtio,firewall=2", wantErr: "invalid format - firewall: type check ('boolean') failed - got '2'"},
		{in: "virtio,link_down=maybe", wantErr: "invalid format - link_down: type check ('boolean') failed - got 'maybe'"},
		{in: "virtio,tag=0", wantErr: "invalid format - tag: value must have a minimum value of 1"},
		{in: "virtio,tag=4095", wantErr: "invalid format - tag: value must have a maximum value of 4094"},
		{in: "virtio,tag=99999999999999999999", wantErr: "invalid format - tag: value must have a maximum value of 4094"},
		{in: "virtio,tag=-99999999999999999999", wantErr: "invalid format - tag: value must have a minimum value of 1"},
		{in: "virtio,tag=1.0", wantErr: "invalid format - tag: type check ('integer') failed - got '1.0'"},
		{in: "virtio,queues=65", wantErr: "invalid format - queues: value must have a maximum value of 64"},
		{in: "virtio,queues=-1", wantErr: "invalid format - queues: value must have a minimum value of 0"},
		{in: "virtio,mtu=0", wantErr: "invalid format - mtu: value must have a minimum value of 1"},
		{in: "virtio,mtu=65521", wantErr: "invalid format - mtu: value must have a maximum value of 65520"},
		{in: "virtio,rate=-1", wantErr: "invalid format - rate: value must have a minimum value of 0"},
		{in: "virtio,rate=-0.5e-3", wantErr: "invalid format - rate: value must have a minimum value of 0"},
		{in: "virtio,rate=fast", wantErr: "invalid format - rate: type check ('number') failed - got 'fast'"},
		{in: "virtio,rate=1e", wantErr: "invalid format - rate: type check ('number') failed - got '1e'"},
		{in: "virtio,rate=.", wantErr: "invalid format - rate: type check ('number') failed - got '.'"},
		{in: "virtio,trunks=10;", wantErr: "invalid format - trunks: value does not match the regex pattern"},
		{in: "virtio,trunks=10-", wantErr: "invalid format - trunks: value does not match the regex pattern"},
		{in: "virtio,trunks=a", wantErr: "invalid format - trunks: value does not match the regex pattern"},
	}
	for _, tt := range tests {
		got, err := ParseNetSpec(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrInvalidNetSpec) {
				t.Errorf("ParseNetSpec(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseNetSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		wantStr := tt.wantStr
		if wantStr == "" {
			wantStr = tt.in
		}
		if s := got.String(); s != wantStr {
			t.Errorf("ParseNetSpec(%q).String() = %q, want %q", tt.in, s, wantStr)
		}
	}
}

func TestNetSpecString(t *testing.T) {
	tests := []struct {
		n    NetSpec
		want string
	}{
		{NetSpec{}, ""},
		{NetSpec{Model: "virtio"}, "virtio"},
		{NetSpec{Model: "virtio", MAC: "BC:24:11:00:00:01", Bridge: "vmbr0", Firewall: ptrBool(true)}, "virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1"},
		{NetSpec{MAC: "BC:24:11:00:00:01"}, "macaddr=BC:24:11:00:00:01"},
		{NetSpec{Model: "e1000", Trunks: "1", Tag: ptrInt(2), Rate: "3", Queues: ptrInt(4), MTU: ptrInt(5), LinkDown: ptrBool(false), Firewall: ptrBool(false), Bridge: "b"},
			"e1000,bridge=b,firewall=0,link_down=0,mtu=5,queues=4,rate=3,tag=2,trunks=1"},
	}
	for _, tt := range tests {
		if got := tt.n.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func FuzzParseNetSpec(f *testing.F) {
	for _, s := range []string{
		"virtio,bridge=vmbr0",
		"virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,firewall=1",
		"model=virtio,bridge=vmbr0,firewall=0,link_down=0,macaddr=BC:24:11:AA:BB:CC,queues=0,rate=1.000000,tag=10,mtu=1500,trunks=10;20-30",
		"e1000,tag=+05", "virtio,rate=-0", "virtio,virtio", "bridge=x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseNetSpec(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidNetSpec) {
				t.Fatalf("error %v does not wrap ErrInvalidNetSpec", err)
			}
			return
		}
		canon := n.String()
		n2, err := ParseNetSpec(canon)
		if err != nil || !reflect.DeepEqual(n2, n) {
			t.Fatalf("ParseNetSpec(%q) = %+v, String %q re-parsed %+v, %v", s, n, canon, n2, err)
		}
		if again := n2.String(); again != canon {
			t.Fatalf("String not stable: %q -> %q", canon, again)
		}
	})
}
