package wake

import (
	"fmt"
	"time"

	// IANA time zones for keep_warm's time_zone, also where the system
	// has none (minimal containers).
	_ "time/tzdata"
)

// loadTimeZone reads time_zone: an IANA name ("Europe/Paris"); "" is the
// process's local time.
func loadTimeZone(name string) (*time.Location, error) {
	if name == "" {
		return nil, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time_zone %q: %w", name, err)
	}
	return loc, nil
}
