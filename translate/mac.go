package translate

import (
	"crypto/sha256"
	"fmt"
)

// PVEMACPrefix is the OUI PVE uses for generated MAC addresses (Proxmox
// Server Solutions GmbH); MACs with it look native to PVE clients.
const PVEMACPrefix = "BC:24:11"

// GenerateMAC derives a unicast MAC address "BC:24:11:XX:XX:XX" (upper-case
// hex, as PVE prints generated MACs) from seed. The last three bytes are the
// first bytes of SHA-256(seed), so any seed length gives well-spread,
// reproducible addresses: pass random bytes for a fresh NIC, or e.g.
// "<namespace>/<vm>/net0" to derive a stable one.
func GenerateMAC(seed []byte) string {
	sum := sha256.Sum256(seed)
	return fmt.Sprintf("%s:%02X:%02X:%02X", PVEMACPrefix, sum[0], sum[1], sum[2])
}
