// Package observed holds end-to-end tests of what Caddy itself records of
// the proxmox_api handler's answers: the status in its access log and the
// code label of its caddy_http_* metrics, next to the reason phrase the
// client reads. They run an in-process Caddy of their own, with an access
// log and metrics on.
package observed
