package translate

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPoolIDs(t *testing.T) {
	cases := []struct {
		id        string
		pve       string // "" = valid; else a substring of the error
		startsLtr bool
		parent    string
	}{
		{id: "team-a", startsLtr: true},
		{id: "a", startsLtr: true},
		{id: "1lab"}, // PVE's format; PVE's create refuses it
		{id: "Team_A", startsLtr: true},
		{id: "team.a", startsLtr: true},
		{id: "parent/child", startsLtr: true, parent: "parent"},
		{id: "a/b/c", startsLtr: true, parent: "a/b"},
		{id: "a/1b", parent: "a"}, // the leaf must start with a letter
		{id: "1a/b", startsLtr: true, parent: "1a"},
		{id: "a/b/c/d", pve: "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)", startsLtr: true, parent: "a/b/c"},
		{id: "bad name", pve: "invalid format - pool name 'bad name' contains invalid characters", startsLtr: true},
		{id: "", pve: "contains invalid characters"},
		{id: "a//b", pve: "contains invalid characters", startsLtr: true, parent: "a/"},
		{id: "a/", pve: "contains invalid characters", parent: "a"},
	}
	for _, c := range cases {
		err := ParsePoolID(c.id)
		if c.pve == "" && err != nil || c.pve != "" && (err == nil || !strings.Contains(err.Error(), c.pve)) {
			t.Errorf("ParsePoolID(%q) = %v, want %q", c.id, err, c.pve)
		}
		if err != nil && !errors.Is(err, ErrInvalidPoolID) {
			t.Errorf("ParsePoolID(%q): %v is not ErrInvalidPoolID", c.id, err)
		}
		if got := PoolStartsWithLetter(c.id); got != c.startsLtr {
			t.Errorf("PoolStartsWithLetter(%q) = %v", c.id, got)
		}
		if p, ok := PoolParent(c.id); p != c.parent || ok != (c.parent != "") {
			t.Errorf("PoolParent(%q) = %q %v, want %q", c.id, p, ok, c.parent)
		}
	}
	for _, c := range []struct {
		id, ancestor string
		want         bool
	}{
		{"a", "a", true}, {"a/b", "a", true}, {"a/b/c", "a", true}, {"a/b/c", "a/b", true},
		{"ab", "a", false}, {"a", "a/b", false}, {"b/a", "a", false},
	} {
		if got := PoolWithin(c.id, c.ancestor); got != c.want {
			t.Errorf("PoolWithin(%q, %q) = %v", c.id, c.ancestor, got)
		}
	}
}

// TestPoolRecords: record names are valid object names, differ for ids
// that differ only in case or in characters names cannot hold, and a
// record reads back what was written; a record under another id's name is
// refused.
func TestPoolRecords(t *testing.T) {
	ids := []string{"team-a", "Team-A", "team_a", "team.a", "team/a", "a/b/c", "---", strings.Repeat("x", 80), strings.Repeat("x", 81)}
	seen := map[string]string{}
	for _, id := range ids {
		name := PoolRecordName(id)
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 || len(name) > 63 {
			t.Errorf("PoolRecordName(%q) = %q: %v", id, name, msgs)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("%q and %q share record %s", id, other, name)
		}
		seen[name] = id
	}
	if got := PoolRecordName("Team/Dev_1"); !strings.HasPrefix(got, "pve-pool-team-dev-1-") {
		t.Errorf("PoolRecordName is not readable: %s", got)
	}
	r := PoolRecord{ID: "team/dev", Comment: "line 1\nline 2"}
	r.SetStorage("zfs", true)
	r.SetStorage("local", true)
	r.SetStorage("local", true)
	if !slices.Equal(r.Storage, []string{"local", "zfs"}) || !r.HasStorage("zfs") || r.HasStorage("ceph") {
		t.Fatalf("storage %v", r.Storage)
	}
	back, err := ParsePoolRecord(PoolRecordName(r.ID), r.Data())
	if err != nil || back.ID != r.ID || back.Comment != r.Comment || !slices.Equal(back.Storage, r.Storage) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	r.SetStorage("local", false)
	r.SetStorage("nfs", false)
	if !slices.Equal(r.Storage, []string{"zfs"}) || !slices.Equal(back.Storage, []string{"local", "zfs"}) {
		t.Fatalf("after removing: %v (the copy read back: %v)", r.Storage, back.Storage)
	}
	if _, err := ParsePoolRecord("pve-pool-x", r.Data()); err == nil || !strings.Contains(err.Error(), `holds pool "team/dev"`) {
		t.Fatalf("record under another name: %v", err)
	}
	if _, err := ParsePoolRecord(PoolRecordName("a b"), map[string]string{"poolid": "a b"}); err == nil {
		t.Fatal("record with a bad id read")
	}
	if d := (PoolRecord{ID: "p"}).Data(); len(d) != 1 {
		t.Fatalf("empty fields written: %v", d)
	}
}

func TestStorageIDsAndLists(t *testing.T) {
	for id, want := range map[string]string{
		"local-lvm": "", "ceph.rbd_1": "", "x": "cannot be shorter than 2 characters",
		"1st": "contains illegal characters", "a-": "contains illegal characters",
	} {
		err := ParseStorageID(id)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ParseStorageID(%q) = %v, want %q", id, err, want)
		}
	}
	for in, want := range map[string][]string{
		"100,101;102 103":  {"100", "101", "102", "103"},
		" 100 ,, 101 ":     {"100", "101"},
		"100\x00101":       {"100", "101"},
		"":                 nil,
		"100\t\n101\r\v\f": {"100", "101"},
	} {
		if got := SplitList(in); !slices.Equal(got, want) {
			t.Errorf("SplitList(%q) = %q, want %q", in, got, want)
		}
	}
}
