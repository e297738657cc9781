package kube

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// vmAt is a VM created at t0+age; labels are key/value pairs.
func vmAt(ns, name string, age time.Duration, labels ...string) *kubevirtv1.VirtualMachine {
	vm := &kubevirtv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
		CreationTimestamp: metav1.NewTime(t0.Add(age)),
	}}
	if len(labels) > 0 {
		vm.Labels = map[string]string{}
		for i := 0; i+1 < len(labels); i += 2 {
			vm.Labels[labels[i]] = labels[i+1]
		}
	}
	return vm
}

// vmWithID is a VM labelled with vmid (any string, valid or not).
func vmWithID(ns, name, vmid string, age time.Duration) *kubevirtv1.VirtualMachine {
	return vmAt(ns, name, age, translate.LabelVMID, vmid)
}

// Two names whose probe-0 fallback ids collide (found by search; checked in
// TestFallbackCollisionFixture).
const collideA, collideB = "vm-49256", "vm-52128"

func TestFallbackCollisionFixture(t *testing.T) {
	a, b := fallback("ns", collideA), fallback("ns", collideB)
	if a != b || a != 262988795 {
		t.Fatalf("fixture broken: FallbackVMID(ns/%s)=%d, FallbackVMID(ns/%s)=%d, want both 262988795", collideA, a, collideB, b)
	}
}

func TestBuildVMIDTable(t *testing.T) {
	// An unlabeled VM and a labelled VM claiming its probe-0 id.
	uID := strconv.Itoa(fallback("n", "u"))
	cases := []struct {
		name      string
		vms       []*kubevirtv1.VirtualMachine
		want      map[string]int
		ambiguous map[int][]string
	}{{
		name: "unique labels are kept",
		vms: []*kubevirtv1.VirtualMachine{
			vmWithID("a", "one", "100", 0), vmWithID("b", "two", "101", time.Hour), vmWithID("a", "max", "999999999", -time.Hour),
		},
		want: map[string]int{"a/one": 100, "b/two": 101, "a/max": 999999999},
	}, {
		name: "a shared label is ambiguous and shown by nobody",
		vms: []*kubevirtv1.VirtualMachine{
			vmWithID("y", "b", "200", 0), vmWithID("x", "a", "200", time.Hour), vmWithID("x", "c", "201", 0),
		},
		want:      map[string]int{"x/a": fallback("x", "a"), "y/b": fallback("y", "b"), "x/c": 201},
		ambiguous: map[int][]string{200: {"x/a", "y/b"}},
	}, {
		name: "three claimants, listed sorted",
		vms: []*kubevirtv1.VirtualMachine{
			vmWithID("z", "q", "300", 0), vmWithID("a", "q", "300", 0), vmWithID("m", "q", "300", 0),
		},
		want:      map[string]int{"a/q": fallback("a", "q"), "m/q": fallback("m", "q"), "z/q": fallback("z", "q")},
		ambiguous: map[int][]string{300: {"a/q", "m/q", "z/q"}},
	}, {
		name: "unlabeled VMs get their probe-0 fallback id",
		vms: []*kubevirtv1.VirtualMachine{
			vmAt("lab", "legacy-app", 0), vmAt("default", "other", 0, "app", "x"), vmWithID("default", "web", "150", 0),
		},
		want: map[string]int{"lab/legacy-app": fallback("lab", "legacy-app"), "default/other": fallback("default", "other"), "default/web": 150},
	}, {
		name: "invalid labels count as no label",
		vms: []*kubevirtv1.VirtualMachine{
			vmWithID("n", "letters", "abc", 0), vmWithID("n", "short", "99", 0), vmWithID("n", "zero", "0100", 0),
			vmWithID("n", "empty", "", 0), vmWithID("n", "signed", "+100", 0), vmWithID("n", "long", "1000000000", 0),
			vmWithID("n", "space", " 100", 0),
		},
		want: map[string]int{
			"n/letters": fallback("n", "letters"), "n/short": fallback("n", "short"), "n/zero": fallback("n", "zero"),
			"n/empty": fallback("n", "empty"), "n/signed": fallback("n", "signed"), "n/long": fallback("n", "long"),
			"n/space": fallback("n", "space"),
		},
	}, {
		name: "a label beats an older unlabeled VM's fallback, which probes on",
		vms: []*kubevirtv1.VirtualMachine{
			vmAt("n", "u", -time.Hour), vmWithID("n", "l", uID, time.Hour),
		},
		want: map[string]int{"n/l": fallback("n", "u"), "n/u": translate.FallbackVMID("n", "u", 1)},
	}, {
		name: "an ambiguous id is not handed out as a fallback",
		vms: []*kubevirtv1.VirtualMachine{
			vmAt("n", "u", 0), vmWithID("n", "l1", uID, 0), vmWithID("n", "l2", uID, 0),
		},
		want: map[string]int{
			"n/u": translate.FallbackVMID("n", "u", 1), "n/l1": fallback("n", "l1"), "n/l2": fallback("n", "l2"),
		},
		ambiguous: map[int][]string{fallback("n", "u"): {"n/l1", "n/l2"}},
	}, {
		name: "the older VM keeps a contested fallback id",
		vms:  []*kubevirtv1.VirtualMachine{vmAt("ns", collideB, time.Minute), vmAt("ns", collideA, 0)},
		want: map[string]int{"ns/" + collideA: 262988795, "ns/" + collideB: translate.FallbackVMID("ns", collideB, 1)},
	}, {
		name: "age, not name, decides",
		vms:  []*kubevirtv1.VirtualMachine{vmAt("ns", collideA, time.Minute), vmAt("ns", collideB, 0)},
		want: map[string]int{"ns/" + collideB: 262988795, "ns/" + collideA: translate.FallbackVMID("ns", collideA, 1)},
	}, {
		name: "same age: namespace/name order decides",
		vms:  []*kubevirtv1.VirtualMachine{vmAt("ns", collideB, 0), vmAt("ns", collideA, 0)},
		want: map[string]int{"ns/" + collideA: 262988795, "ns/" + collideB: translate.FallbackVMID("ns", collideB, 1)},
	}, {
		name: "ambiguous claimants probe in age order too",
		vms: []*kubevirtv1.VirtualMachine{
			vmWithID("ns", collideA, "777", time.Minute), vmWithID("ns", collideB, "777", 0),
		},
		want:      map[string]int{"ns/" + collideB: 262988795, "ns/" + collideA: translate.FallbackVMID("ns", collideA, 1)},
		ambiguous: map[int][]string{777: {"ns/" + collideA, "ns/" + collideB}},
	}, {
		name: "no VMs",
		want: map[string]int{},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Every input order gives the same table.
			orders := [][]*kubevirtv1.VirtualMachine{tc.vms, reversed(tc.vms), rotated(tc.vms)}
			for _, vms := range orders {
				tab := buildVMIDTable(vms)
				byKey, byID := tab.keyMap(), tab.idMap()
				if !maps.Equal(byKey, tc.want) {
					t.Fatalf("byKey = %v, want %v", byKey, tc.want)
				}
				if len(byID) != len(tc.want) {
					t.Fatalf("byID has %d ids, want %d: %v", len(byID), len(tc.want), byID)
				}
				maxID := 0
				for key, id := range tc.want {
					if byID[id] != key {
						t.Errorf("byID[%d] = %q, want %q", id, byID[id], key)
					}
					if got, err := tab.resolve(id); err != nil || got != key {
						t.Errorf("resolve(%d) = %q, %v; want %q", id, got, err, key)
					}
					if !tab.taken(id) {
						t.Errorf("taken(%d) = false", id)
					}
					maxID = max(maxID, id)
				}
				if tab.maxID != maxID {
					t.Errorf("maxID = %d, want %d", tab.maxID, maxID)
				}
				if len(tab.ambiguous) != len(tc.ambiguous) {
					t.Fatalf("ambiguous = %v, want %v", tab.ambiguous, tc.ambiguous)
				}
				for id, claimants := range tc.ambiguous {
					if !reflect.DeepEqual(tab.ambiguous[id], claimants) {
						t.Errorf("ambiguous[%d] = %v, want %v", id, tab.ambiguous[id], claimants)
					}
					if key, ok := byID[id]; ok {
						t.Errorf("ambiguous id %d is shown by %s", id, key)
					}
					if !tab.taken(id) {
						t.Errorf("taken(%d) = false for an ambiguous id", id)
					}
					_, err := tab.resolve(id)
					var amb *AmbiguousError
					if !errors.As(err, &amb) {
						t.Fatalf("resolve(%d) error = %v, want *AmbiguousError", id, err)
					}
					if amb.VMID != id || !slices.Equal(amb.Claimants, claimants) {
						t.Errorf("AmbiguousError = %+v, want VMID %d claimants %v", amb, id, claimants)
					}
				}
			}
		})
	}
}

// keyMap is the table as namespace/name → vmid, as idOf answers.
func (t *vmidTable) keyMap() map[string]int {
	out := map[string]int{}
	for _, key := range t.keys {
		ns, name, _ := strings.Cut(key, "/")
		if id, ok := t.idOf(ns, name); ok {
			out[key] = id
		}
	}
	return out
}

// idMap is the table as vmid → namespace/name, as resolve answers.
func (t *vmidTable) idMap() map[int]string {
	out := map[int]string{}
	for _, id := range t.ids {
		if key, err := t.resolve(int(id)); err == nil {
			out[int(id)] = key
		}
	}
	return out
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

func rotated[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return append(slices.Clone(s[1:]), s[0])
}

func TestAmbiguousErrorMessage(t *testing.T) {
	err := &AmbiguousError{VMID: 200, Claimants: []string{"x/a", "y/b"}}
	want := "VM 200 is ambiguous: claimed by x/a, y/b; address them by their own ids or fix the pve.caddy-proxmox.io/vmid labels"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestVMIDTableTakenAndNotFound(t *testing.T) {
	tab := buildVMIDTable([]*kubevirtv1.VirtualMachine{
		vmWithID("n", "a", "100", 0), vmWithID("n", "b", "200", 0), vmWithID("n", "c", "200", 0), vmAt("n", "d", 0),
	})
	cases := []struct {
		id    int
		taken bool
	}{
		{100, true}, {200, true}, {fallback("n", "d"), true}, {fallback("n", "b"), true},
		{101, false}, {199, false}, {0, false}, {-1, false}, {translate.MaxVMID, false},
	}
	for _, tc := range cases {
		if got := tab.taken(tc.id); got != tc.taken {
			t.Errorf("taken(%d) = %v, want %v", tc.id, got, tc.taken)
		}
		if !tc.taken {
			if _, err := tab.resolve(tc.id); !errors.Is(err, ErrNotFound) {
				t.Errorf("resolve(%d) error = %v, want ErrNotFound", tc.id, err)
			}
		}
	}
}

// tableCluster is a Cluster whose vmid table is fixed (no informers).
func tableCluster(vms ...*kubevirtv1.VirtualMachine) *Cluster {
	c := &Cluster{}
	c.vmidTab.Store(buildVMIDTable(vms))
	return c
}

func TestNextVMID(t *testing.T) {
	c := tableCluster(
		vmWithID("n", "a", "100", 0), vmWithID("n", "b", "101", 0), vmWithID("n", "c", "103", 0),
		vmWithID("n", "d", "104", 0), vmWithID("n", "e", "104", 0), // ambiguous
		vmWithID("n", "f", "108", 0),
	)
	set := func(ids ...int) func(int) bool {
		return func(id int) bool { return slices.Contains(ids, id) }
	}
	cases := []struct {
		name     string
		from     int
		reserved func(int) bool
		want     int
		ok       bool
	}{
		{"lowest free id", 0, nil, 102, true},
		{"below the minimum starts at 100", 50, nil, 102, true},
		{"reserved ids are skipped", 100, set(102), 105, true},
		{"taken and ambiguous ids are skipped", 103, nil, 105, true},
		{"a free from is returned", 106, nil, 106, true},
		{"several reserved in a row", 105, set(105, 106, 107), 109, true},
		{"labelled id skipped after reserved", 107, set(107), 109, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := c.NextVMID(tc.from, tc.reserved)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("NextVMID(%d) = %d, %v; want %d, %v", tc.from, got, ok, tc.want, tc.ok)
			}
		})
	}
	for id, want := range map[int]bool{100: true, 102: false, 104: true, 108: true, 109: false} {
		if got := c.VMIDTaken(id); got != want {
			t.Errorf("VMIDTaken(%d) = %v, want %v", id, got, want)
		}
	}

	full := tableCluster(vmWithID("n", "top", strconv.Itoa(translate.MaxVMID), 0))
	if id, ok := full.NextVMID(translate.MaxVMID, nil); ok || id != 0 {
		t.Errorf("NextVMID(max) with max taken = %d, %v; want 0, false", id, ok)
	}
	if id, ok := full.NextVMID(translate.MaxVMID-1, set(translate.MaxVMID-1)); ok || id != 0 {
		t.Errorf("NextVMID(max-1) with max-1 reserved = %d, %v; want 0, false", id, ok)
	}
	if id, ok := full.NextVMID(translate.MaxVMID-1, nil); !ok || id != translate.MaxVMID-1 {
		t.Errorf("NextVMID(max-1) = %d, %v; want %d, true", id, ok, translate.MaxVMID-1)
	}
}

func TestCompareKey(t *testing.T) {
	cases := []struct {
		key, ns, name string
	}{
		{"a/x", "a", "x"}, {"a/x", "a", "y"}, {"a/y", "a", "x"},
		// '-' sorts before '/': ns "a-b" before "a" as keys.
		{"a-b/x", "a", "x"}, {"a/x", "a-b", "x"}, {"ab/x", "a", "x"}, {"a/x", "ab", "x"},
		{"a", "a", "x"}, {"", "a", "x"}, {"a/", "a", ""}, {"a/x", "a", ""}, {"abc/x", "ab", "c/x"},
	}
	for _, tc := range cases {
		want := strings.Compare(tc.key, tc.ns+"/"+tc.name)
		if got := compareKey(tc.key, tc.ns, tc.name); got != want {
			t.Errorf("compareKey(%q, %q, %q) = %d, want %d", tc.key, tc.ns, tc.name, got, want)
		}
	}
}

// TestVMIDTableByKey: the table's lookups by name and by namespace hold
// for namespaces one of which prefixes another ('-' sorts before '/').
func TestVMIDTableByKey(t *testing.T) {
	tab := buildVMIDTable([]*kubevirtv1.VirtualMachine{
		vmWithID("a", "x", "100", 0), vmWithID("a-b", "x", "101", 0), vmWithID("ab", "x", "102", 0),
		vmWithID("a", "z", "103", 0), vmWithID("a", "y", "104", 0), vmWithID("b", "x", "105", 0),
		vmWithID("b", "amb1", "200", 0), vmWithID("b", "amb2", "200", 0),
	})
	for key, want := range map[string]int{"a/x": 100, "a-b/x": 101, "ab/x": 102, "a/z": 103, "a/y": 104, "b/x": 105} {
		ns, name, _ := strings.Cut(key, "/")
		if id, ok := tab.idOf(ns, name); !ok || id != want {
			t.Errorf("idOf(%s) = %d, %v; want %d", key, id, ok, want)
		}
	}
	for _, key := range []string{"a/w", "a/xx", "a-b/y", "c/x", "/x", "a/"} {
		ns, name, _ := strings.Cut(key, "/")
		if id, ok := tab.idOf(ns, name); ok {
			t.Errorf("idOf(%s) = %d, want none", key, id)
		}
	}
	for ns, want := range map[string][]string{
		"a": {"a/x", "a/y", "a/z"}, "a-b": {"a-b/x"}, "ab": {"ab/x"}, "b": {"b/amb1", "b/amb2", "b/x"},
		"": nil, "c": nil, "a-": nil,
	} {
		if got := slices.Collect(tab.namespaceKeys(ns)); !slices.Equal(got, want) {
			t.Errorf("namespaceKeys(%q) = %v, want %v", ns, got, want)
		}
	}
	if empty := buildVMIDTable(nil); slices.Collect(empty.namespaceKeys("a")) != nil {
		t.Errorf("an empty table lists VMs")
	}
	if _, ok := buildVMIDTable(nil).idOf("a", "x"); ok {
		t.Errorf("an empty table finds a VM")
	}
}

// TestVMIDTableOutOfRange: ids no VM can have are neither taken nor
// resolved, whatever their size.
func TestVMIDTableOutOfRange(t *testing.T) {
	tab := buildVMIDTable([]*kubevirtv1.VirtualMachine{vmWithID("n", "top", strconv.Itoa(translate.MaxVMID), 0)})
	for _, id := range []int{-1 << 40, -1, 0, 1<<31 - 1, 1 << 31, 1<<32 + translate.MaxVMID} {
		if tab.taken(id) {
			t.Errorf("taken(%d)", id)
		}
		if _, err := tab.resolve(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("resolve(%d) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestVMIDTableNextFree(t *testing.T) {
	tab := buildVMIDTable([]*kubevirtv1.VirtualMachine{
		vmWithID("n", "a", "100", 0), vmWithID("n", "b", "101", 0), vmWithID("n", "c", "102", 0),
		vmWithID("n", "d", "103", 0), vmWithID("n", "e", "103", 0), // ambiguous
		vmWithID("n", "f", "104", 0), vmWithID("n", "g", "106", 0),
		vmWithID("n", "top", strconv.Itoa(translate.MaxVMID), 0),
	})
	cases := []struct{ from, want int }{
		{100, 105}, {103, 105}, {105, 105}, {106, 107}, {99, 99}, {translate.MaxVMID - 1, translate.MaxVMID - 1},
	}
	for _, tc := range cases {
		if got, ok := tab.nextFree(tc.from); !ok || got != tc.want {
			t.Errorf("nextFree(%d) = %d, %v; want %d", tc.from, got, ok, tc.want)
		}
	}
	if got, ok := tab.nextFree(translate.MaxVMID); ok {
		t.Errorf("nextFree(max) = %d with max taken, want none", got)
	}
}
