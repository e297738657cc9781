package lxc

import (
	"fmt"
	"testing"
)

// Every readiness check is an event, and each replaces the one before in
// the history a late subscriber replays: one line that counts, whatever
// the number of checks. Steps of one phase that are not updates (two
// reasons to wait) stay apart.
func TestProgressUpdatesReplaceTheirLine(t *testing.T) {
	var p progress
	_, live, cancel := p.subscribe()
	defer cancel()
	p.emit(Event{Phase: "starting", Message: "Waking up web"})
	p.emit(Event{Phase: "waiting", Message: "Backup in progress."})
	p.emit(Event{Phase: "waiting", Message: "Migration in progress."})
	for i := 1; i <= 200; i++ {
		p.emit(Event{Phase: "probing", Message: fmt.Sprintf("Waiting for the service (check %d)", i), Update: true})
	}
	p.emit(Event{Phase: "ready", Final: true})
	hist, _, cancel2 := p.subscribe()
	defer cancel2()
	var got []string
	for _, e := range hist {
		got = append(got, e.Phase+": "+e.Message)
	}
	want := fmt.Sprint([]string{"starting: Waking up web", "waiting: Backup in progress.", "waiting: Migration in progress.",
		"probing: Waiting for the service (check 200)", "ready: "})
	if fmt.Sprint(got) != want {
		t.Fatalf("history\n got %v\nwant %v", got, want)
	}
	// A live subscriber got the checks one by one, as fast as it reads
	// (its buffer holds 32; the rest wait for the final event).
	checks := 0
	for len(live) > 0 {
		if e := <-live; e.Phase == "probing" {
			checks++
			if want := fmt.Sprintf("Waiting for the service (check %d)", checks); e.Message != want {
				t.Fatalf("live event %q, want %q", e.Message, want)
			}
		}
	}
	if checks < 20 {
		t.Fatalf("a live subscriber saw %d checks", checks)
	}
}
