//go:build !unix

package benchload

import "time"

// processCPU is not known here.
func processCPU() time.Duration { return 0 }
