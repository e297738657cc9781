package translate

import (
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestParseTags(t *testing.T) {
	const bad = "invalid format - invalid characters in tag"
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "", want: nil},
		{in: " ;, ", want: nil},
		{in: "web", want: []string{"web"}},
		{in: "b;a", want: []string{"a", "b"}},
		{in: "prod,web db", want: []string{"db", "prod", "web"}},
		{in: "Web;web;WEB", want: []string{"web"}},
		{in: "B;a;C", want: []string{"a", "b", "c"}},
		{in: "k8s.io;v1+beta;_x;a-b", want: []string{"_x", "a-b", "k8s.io", "v1+beta"}},
		{in: "a\tb\nc\r\vd\fe", want: []string{"a", "b", "c", "d", "e"}},
		{in: ";;a;;", want: []string{"a"}},
		{in: "a\x00b", want: []string{"a", "b"}},
		{in: "a\x00", want: []string{"a"}},
		{in: "a b\x00c", wantErr: bad}, // with NUL only NUL separates
		{in: "\x00a", wantErr: bad},
		{in: "-a", wantErr: bad},
		{in: ".a", wantErr: bad},
		{in: "+a", wantErr: bad},
		{in: "a/b", wantErr: bad},
		{in: "ok;bad!", wantErr: bad},
		{in: "ünï", wantErr: bad},
		{in: "a\u00a0b", wantErr: bad},
	}
	for _, tt := range tests {
		got, err := ParseTags(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrInvalidTag) {
				t.Errorf("ParseTags(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseTags(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatTags(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{}, ""},
		{[]string{"web"}, "web"},
		{[]string{"b", "a"}, "a;b"},
		{[]string{"Web", "web", "", "DB"}, "db;web"},
	}
	for _, tt := range tests {
		if got := FormatTags(tt.in); got != tt.want {
			t.Errorf("FormatTags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzParseTags(f *testing.F) {
	for _, s := range []string{"a;b", "prod,web db", "Web;web", "k8s.io;v1+beta", "a\x00b", "bad!", "", " ; "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tags, err := ParseTags(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidTag) {
				t.Fatalf("error %v does not wrap ErrInvalidTag", err)
			}
			return
		}
		if !sort.StringsAreSorted(tags) {
			t.Fatalf("ParseTags(%q) = %q is not sorted", s, tags)
		}
		for i, tag := range tags {
			if !validTag(tag) || tag != strings.ToLower(tag) || (i > 0 && tags[i-1] == tag) {
				t.Fatalf("ParseTags(%q) = %q has a bad or duplicate tag %q", s, tags, tag)
			}
		}
		formatted := FormatTags(tags)
		back, err := ParseTags(formatted)
		if err != nil || !reflect.DeepEqual(back, tags) {
			t.Fatalf("ParseTags(%q) = %q, FormatTags = %q, re-parsed %q, %v", s, tags, formatted, back, err)
		}
	})
}
