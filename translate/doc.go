// Package translate holds the pure mapping between Proxmox VE (PVE) API
// values and the KubeVirt objects that back them: VM IDs, node names, UPIDs,
// guest states, sizes, tickets, tags, roles and the RBAC rule each privilege
// stands for, and VM specs built from and edited by PVE config calls.
//
// Nothing in this package performs I/O. Parsers follow PVE's own grammar
// (pve-common JSONSchema, qemu-server, pve-access-control) so that clients
// which diff what they sent against what they read back see PVE's behaviour.
// Where a PVE 8 and a PVE 9 behaviour differ, this package follows PVE 8,
// because the emulated server reports a PVE 8.x version.
//
// Validation errors carry PVE's own wording in Error(), so the API layer can
// forward them verbatim in the "errors" map of a 400 response; use errors.Is
// with the package's Err* sentinels to classify them.
package translate
