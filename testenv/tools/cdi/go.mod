module github.com/caddy-proxmox/caddy-proxmox/testenv/tools/cdi

go 1.26.0

require kubevirt.io/containerized-data-importer v1.64.0

// CDI's own go.mod points this at its staging/ folder (ignored for a
// dependency) and requires v0.0.0; only CDI's CRD strings are used here.
replace kubevirt.io/containerized-data-importer-api => kubevirt.io/containerized-data-importer-api v1.64.0
