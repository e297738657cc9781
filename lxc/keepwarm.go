package lxc

import (
	"fmt"
	"strings"
	"time"
)

// Window is a recurring keep-warm period in the config's time zone:
// while inside it, a guest is never stopped for idleness, and it is
// started when the window opens.
type Window struct {
	// Days the window starts on (all days if empty).
	Days [7]bool
	// Start and End are minutes after midnight; End < Start wraps past
	// midnight.
	Start, End int
	text       string
}

// String is the window as written.
func (w Window) String() string { return w.text }

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// ParseWindow reads "09:00-18:00", "Mon-Fri 09:00-18:00" or
// "Sat,Sun 10:00-12:00" (the order of days and times may be swapped).
func ParseWindow(s string) (Window, error) {
	w := Window{text: s}
	var haveTime, haveDays bool
	for _, f := range strings.Fields(s) {
		if strings.Contains(f, ":") {
			a, b, ok := strings.Cut(f, "-")
			if !ok || haveTime {
				return w, fmt.Errorf("keep_warm %q: want HH:MM-HH:MM once", s)
			}
			var err error
			if w.Start, err = clock(a); err != nil {
				return w, fmt.Errorf("keep_warm %q: %w", s, err)
			}
			if w.End, err = clock(b); err != nil {
				return w, fmt.Errorf("keep_warm %q: %w", s, err)
			}
			if w.Start == w.End {
				return w, fmt.Errorf("keep_warm %q: empty window", s)
			}
			haveTime = true
			continue
		}
		if haveDays {
			return w, fmt.Errorf("keep_warm %q: days given twice", s)
		}
		haveDays = true
		for _, part := range strings.Split(strings.ToLower(f), ",") {
			a, b, rng := strings.Cut(part, "-")
			da, ok := weekdays[a]
			if !ok {
				return w, fmt.Errorf("keep_warm %q: unknown day %q", s, a)
			}
			db := da
			if rng {
				if db, ok = weekdays[b]; !ok {
					return w, fmt.Errorf("keep_warm %q: unknown day %q", s, b)
				}
			}
			for d := da; ; d = (d + 1) % 7 {
				w.Days[d] = true
				if d == db {
					break
				}
			}
		}
	}
	if !haveTime {
		return w, fmt.Errorf("keep_warm %q: missing HH:MM-HH:MM", s)
	}
	if !haveDays {
		for i := range w.Days {
			w.Days[i] = true
		}
	}
	return w, nil
}

func clock(s string) (int, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Contains reports whether t is inside the window.
func (w Window) Contains(t time.Time) bool {
	m := t.Hour()*60 + t.Minute()
	if w.Start < w.End {
		return w.Days[t.Weekday()] && m >= w.Start && m < w.End
	}
	// Wraps midnight: the evening part belongs to today, the morning part
	// to the window that started yesterday.
	if m >= w.Start {
		return w.Days[t.Weekday()]
	}
	return m < w.End && w.Days[(t.Weekday()+6)%7]
}

// inWindow reports whether t is inside any window.
func inWindow(ws []Window, t time.Time) bool {
	for _, w := range ws {
		if w.Contains(t) {
			return true
		}
	}
	return false
}
