package translate

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestPoolIDs(t *testing.T) {
	cases := []struct {
		id        string
		pve, ns   string // "" = valid; else a substring of the error
		startsLtr bool
	}{
		{id: "team-a", startsLtr: true},
		{id: "a", startsLtr: true},
		{id: "1lab", startsLtr: false}, // PVE's format and a namespace name; PVE's create refuses it
		{id: "Team_A", ns: "is not a Kubernetes namespace name", startsLtr: true},
		{id: "team.a", ns: "is not a Kubernetes namespace name", startsLtr: true},
		{id: "team-", ns: "is not a Kubernetes namespace name", startsLtr: true},
		{id: strings.Repeat("a", 64), ns: "is not a Kubernetes namespace name", startsLtr: true},
		{id: "parent/child", ns: "is nested", startsLtr: true},
		{id: "a/b/c/d", pve: "invalid format - pool name 'a/b/c/d' nested too deeply (max levels = 3)", startsLtr: true},
		{id: "bad name", pve: "invalid format - pool name 'bad name' contains invalid characters", startsLtr: true},
		{id: "", pve: "contains invalid characters"},
		{id: "a//b", pve: "contains invalid characters", startsLtr: true},
	}
	for _, c := range cases {
		err := ParsePoolID(c.id)
		if c.pve == "" && err != nil || c.pve != "" && (err == nil || !strings.Contains(err.Error(), c.pve)) {
			t.Errorf("ParsePoolID(%q) = %v, want %q", c.id, err, c.pve)
		}
		if err != nil && !errors.Is(err, ErrInvalidPoolID) {
			t.Errorf("ParsePoolID(%q): %v is not ErrInvalidPoolID", c.id, err)
		}
		want := c.ns
		if c.pve != "" {
			want = c.pve
		}
		err = PoolNamespace(c.id)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "invalid format - ")) {
			t.Errorf("PoolNamespace(%q) = %v, want %q", c.id, err, want)
		}
		if got := PoolStartsWithLetter(c.id); got != c.startsLtr {
			t.Errorf("PoolStartsWithLetter(%q) = %v", c.id, got)
		}
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
