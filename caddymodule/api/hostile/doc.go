// Package hostile holds end-to-end tests of the proxmox_api handler under
// hostile clients: the credentials matrix (forged, expired, tampered and
// replayed tickets, header injection, case and encoding tricks), body size
// limits, deep and huge JSON, slow and half-open connections. They run an
// in-process Caddy of their own, because they reload its configuration
// (ticket key rotation) and count its goroutines.
package hostile
