package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
)

// snapNameRE is PVE's pve-configid format for snapshot names.
var snapNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_\-]{1,39}$`)

// ValidSnapName checks a PVE snapshot name; "current" is reserved.
func ValidSnapName(s string) error {
	if !snapNameRE.MatchString(s) {
		return fmt.Errorf("invalid format - invalid configuration ID '%s'", s)
	}
	if s == "current" || s == "vzdump" {
		return fmt.Errorf("invalid snapshot name '%s'", s)
	}
	return nil
}

// SnapshotObjectName derives the VirtualMachineSnapshot name for a PVE
// snapshot: lower-case safe, unique per VM and case-sensitive name (PVE
// names are case-sensitive, Kubernetes names are not).
func SnapshotObjectName(vmid int, snapname string) string {
	sum := sha256.Sum256([]byte(snapname))
	return fmt.Sprintf("vm-%d-%s-%s", vmid, ISOClaimName(snapname), hex.EncodeToString(sum[:])[:8])
}
