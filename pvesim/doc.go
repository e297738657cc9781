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
//
// It also does what real clusters do to a client, each behaviour checked
// against the Proxmox sources named in its comments: HA-managed guests
// whose start and stop tasks only ask pve-ha-manager (which may start a
// guest on another node, and leaves a container that outlives a graceful
// stop in its error state); config locks that fail power tasks the way
// check_lock does; a backup of a stopped VM running it in prelaunch;
// migrations; /cluster/resources rows of a stalled node ("unknown", no
// name); templates; tags; LXC suspend as lxc-checkpoint; powered-off
// nodes (595 from pveproxy), PVE's wakeonlan call and magic packets on the
// LAN, nodes joining after boot; per-token ACLs with the 403s of PVE 8 and
// 9; and guests' usage as pvestatd reports it (CPU as a fraction of the
// guest's CPUs, network and disk byte counters since the guest started,
// the bytes its service exchanged included, measured every StatInterval),
// with a load a test sets (SetLoad) to make a guest busy without any HTTP
// traffic.
package pvesim
