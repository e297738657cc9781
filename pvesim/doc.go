// Package pvesim is an in-process Proxmox VE API simulator for tests and
// for the embedded demo cluster of the proxmox app.
//
// It serves the endpoints go-proxmox calls to discover nodes, read
// /cluster/resources, start, stop, shut down, suspend and resume LXC
// containers and QEMU VMs, follow their tasks (9-field UPIDs that finish
// after a configurable delay) and find their addresses (LXC /interfaces,
// QEMU guest agent). Errors have PVE's shape: the message is the HTTP
// reason phrase and the body is {"data":null,"message":...}.
//
// Guests are real: once started, each one serves HTTP on its own loopback
// address (127.0.0.x) and stops serving when stopped or suspended. Faults
// (slow starts, failed tasks, API errors and timeouts, guests that never
// become ready) are switched on through methods of Sim, and every API call
// is counted per method and path.
package pvesim
