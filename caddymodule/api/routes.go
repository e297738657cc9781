package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// request is one API call being served.
type request struct {
	r  *http.Request
	w  http.ResponseWriter
	p  params
	id identity
	// checks are the permissions the route required; a 403 from
	// Kubernetes is reported against them, as PVE words it.
	checks []check
	// reviewed are the accesses already asked of the apiserver for this
	// request.
	reviewed map[kube.Access]bool
	h        *APIHandler
	c        *kube.Cluster
}

func (q *request) ctx() context.Context { return q.r.Context() }

// result is an endpoint's answer: data plus optional top-level keys.
type result struct {
	data  any
	extra map[string]any
}

// endpoint serves one method+path. It returns the data to wrap in the
// envelope, or an error to answer PVE-style.
type endpoint func(q *request) (any, *apiError)

// requestTimeout bounds the cluster calls one API request makes.
const requestTimeout = 20 * time.Second

// errWritten tells the router that the endpoint answered by itself.
var errWritten = &apiError{}

// public marks endpoints that need no authentication.
const public = true

// handle registers an endpoint under /api2/json.
func (h *APIHandler) handle(mux *http.ServeMux, pattern string, ep endpoint, noAuth ...bool) {
	method, path, _ := strings.Cut(pattern, " ")
	if path == "/" {
		path = "" // paths arrive cleaned: the root is "/api2/json" exactly
	}
	open := len(noAuth) > 0 && noAuth[0]
	wildcards := pathWildcards(path)
	mux.HandleFunc(method+" /api2/json"+path, func(w http.ResponseWriter, r *http.Request) {
		// Every call is bounded: a hung apiserver makes a 503, never a
		// request that hangs with it.
		// Console websockets live as long as the session and are exempt,
		// and so are uploads, which stream their body.
		if !strings.HasSuffix(r.URL.Path, "/vncwebsocket") && !isUploadPath(r.URL.Path) {
			ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		p, perr := parseParams(r)
		if perr == nil {
			perr = p.fromPath(r, wildcards)
		}
		if perr != nil {
			writeError(w, r, perr)
			return
		}
		q := &request{r: r, w: w, p: p, h: h, c: h.cluster}
		if !open {
			id, aerr := h.auth.authenticate(r)
			if aerr != nil {
				h.failAuth(w, r, aerr)
				return
			}
			q.id = id
		}
		// During an outage answer 503 at once, before any access review.
		done, e := withCluster(q, pattern)
		if e != nil {
			writeError(w, r, e)
			return
		}
		defer done()
		if !open {
			if e := h.actAs(q); e != nil {
				writeError(w, r, e)
				return
			}
			// Everyone is Administrator in the default configuration:
			// nothing to check, and no lookups spent on it.
			if need := routeNeeds[pattern]; need != nil && !h.perms.allAdmin && !h.auth.noAuth {
				q.checks = need(h, q)
				if e := h.authorize(q, q.checks); e != nil {
					writeError(w, r, e)
					return
				}
			}
		}
		data, e := ep(q)
		if e == errWritten {
			return
		}
		if e != nil {
			if e.kubeDenied && len(q.checks) > 0 {
				// Kubernetes refused the impersonated call: its RBAC is finer
				// than the review or changed since.
				h.logger.Info("kubernetes refused the caller", zap.String("user", q.id.ID()), zap.String("detail", e.Message))
				e = permErr(vmCheck(q.checks))
			}
			writeError(w, r, e)
			return
		}
		if res, ok := data.(result); ok {
			writeData(w, res.data, res.extra)
			return
		}
		writeData(w, data, nil)
	})
}

// failAuth answers a 401 after pveproxy's delay, which slows password and
// token guessing; the delay ends early if the client goes away.
func (h *APIHandler) failAuth(w http.ResponseWriter, r *http.Request, e *apiError) {
	h.logger.Info("authentication failed", zap.String("remote", r.RemoteAddr), zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("reason", e.Message))
	if h.delay > 0 {
		t := time.NewTimer(h.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	writeError(w, r, e)
}

// notImplemented answers paths the server lacks like pveproxy does, and
// records them: the log and the counter are how gaps get found.
func (h *APIHandler) notImplemented(w http.ResponseWriter, r *http.Request) {
	rel := strings.TrimPrefix(r.URL.Path, "/api2/json")
	if rel == "" {
		rel = "/"
	}
	tmpl := pathTemplate(rel)
	h.metrics.unimplemented.WithLabelValues(methodLabel(r.Method), tmpl).Inc()
	h.logger.Warn("proxmox API gap: method not implemented", zap.String("method", r.Method), zap.String("path", rel), zap.String("template", tmpl))
	writeError(w, r, newError(http.StatusNotImplemented, "Method '%s %s' not implemented", r.Method, rel))
}

// routes is the API's whole surface; every path PVE clients use and this
// server answers is listed here.
func (h *APIHandler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/api2/json/", h.notImplemented)
	mux.HandleFunc("/api2/json", h.notImplemented)

	h.handle(mux, "GET /", h.getRoot)
	h.handle(mux, "GET /version", h.getVersion)

	// access
	h.handle(mux, "GET /access", h.getAccessIndex)
	h.handle(mux, "GET /access/ticket", h.getTicket, public)
	h.handle(mux, "POST /access/ticket", h.postTicket, public)
	h.handle(mux, "GET /access/domains", h.getDomains, public)
	h.handle(mux, "GET /access/domains/{realm}", h.getDomain)
	h.handle(mux, "GET /access/users", h.getUsers)
	h.handle(mux, "GET /access/users/{userid}", h.getUser)
	h.handle(mux, "GET /access/groups", h.getGroups)
	h.handle(mux, "GET /access/groups/{groupid}", h.getGroup)
	h.handle(mux, "GET /access/roles", h.getRoles)
	h.handle(mux, "GET /access/roles/{roleid}", h.getRole)
	h.handle(mux, "GET /access/acl", h.getACL)
	h.handle(mux, "GET /access/permissions", h.getPermissions)

	// cluster
	h.handle(mux, "GET /cluster", h.getClusterIndex)
	h.handle(mux, "GET /cluster/resources", h.getClusterResources)
	h.handle(mux, "GET /cluster/status", h.getClusterStatus)
	h.handle(mux, "GET /cluster/nextid", h.getNextID)
	h.handle(mux, "GET /cluster/tasks", h.getClusterTasks)
	h.handle(mux, "GET /cluster/ha", h.getHAIndex)
	h.handle(mux, "GET /cluster/ha/groups", h.emptyList)
	h.handle(mux, "GET /cluster/ha/resources", h.getHAResources)
	h.handle(mux, "POST /cluster/ha/resources", h.postHAResource)
	h.handle(mux, "GET /cluster/ha/resources/{sid}", h.getHAResource)
	h.handle(mux, "PUT /cluster/ha/resources/{sid}", h.putHAResource)
	h.handle(mux, "DELETE /cluster/ha/resources/{sid}", h.deleteHAResource)
	h.handle(mux, "GET /cluster/ha/status/current", h.getHAStatus)

	// pools and storage
	h.handle(mux, "GET /pools", h.getPools)
	h.handle(mux, "POST /pools", h.postPool)
	h.handle(mux, "PUT /pools", h.putPool)
	h.handle(mux, "DELETE /pools", h.deletePool)
	h.handle(mux, "GET /pools/{poolid}", h.getPool)
	h.handle(mux, "PUT /pools/{poolid}", h.putPool)
	h.handle(mux, "DELETE /pools/{poolid}", h.deletePool)
	h.handle(mux, "GET /storage", h.getStorageConfig)
	h.handle(mux, "GET /storage/{storage}", h.getStorageConfigOne)

	// nodes
	h.handle(mux, "GET /nodes", h.getNodes)
	h.handle(mux, "GET /nodes/{node}", h.getNodeIndex)
	h.handle(mux, "GET /nodes/{node}/status", h.getNodeStatus)
	h.handle(mux, "GET /nodes/{node}/rrddata", h.getNodeRRDData)
	h.handle(mux, "GET /nodes/{node}/version", h.getNodeVersion)
	h.handle(mux, "GET /nodes/{node}/time", h.getNodeTime)
	h.handle(mux, "GET /nodes/{node}/dns", h.getNodeDNS)
	h.handle(mux, "GET /nodes/{node}/hosts", h.getNodeHosts)
	h.handle(mux, "GET /nodes/{node}/network", h.getNodeNetwork)
	h.handle(mux, "GET /nodes/{node}/storage", h.getNodeStorage)
	h.handle(mux, "GET /nodes/{node}/storage/{storage}/status", h.getNodeStorageStatus)
	h.handle(mux, "GET /nodes/{node}/storage/{storage}/content", h.getStorageContent)
	h.handle(mux, "GET /nodes/{node}/storage/{storage}/content/{volume}", h.getStorageVolume)
	// {volume...}: proxmoxer and Ansible send local:iso/x.iso unescaped,
	// and PVE takes the rest of the path as the volume.
	h.handle(mux, "DELETE /nodes/{node}/storage/{storage}/content/{volume...}", h.deleteStorageVolume)
	h.handle(mux, "POST /nodes/{node}/storage/{storage}/download-url", h.postDownloadURL)
	h.handle(mux, "POST /nodes/{node}/storage/{storage}/upload", h.postUpload)
	h.handle(mux, "GET /nodes/{node}/query-url-metadata", h.getQueryURLMetadata)
	h.handle(mux, "GET /nodes/{node}/lxc", h.getNodeLXC)
	h.handle(mux, "GET /nodes/{node}/tasks", h.getNodeTasks)
	h.handle(mux, "GET /nodes/{node}/tasks/{upid}", h.getTaskIndex)
	h.handle(mux, "GET /nodes/{node}/tasks/{upid}/status", h.getTaskStatus)
	h.handle(mux, "GET /nodes/{node}/tasks/{upid}/log", h.getTaskLog)

	// qemu
	h.handle(mux, "GET /nodes/{node}/qemu", h.getQemuList)
	h.handle(mux, "POST /nodes/{node}/qemu", h.postQemu)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}", h.getQemuIndex)
	h.handle(mux, "DELETE /nodes/{node}/qemu/{vmid}", h.deleteQemu)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/config", h.getQemuConfig)
	h.handle(mux, "PUT /nodes/{node}/qemu/{vmid}/config", h.putQemuConfig)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/config", h.postQemuConfig)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/pending", h.getQemuPending)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/cloudinit", h.getQemuCloudinit)
	h.handle(mux, "PUT /nodes/{node}/qemu/{vmid}/cloudinit", h.putQemuCloudinit)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/cloudinit/dump", h.getQemuCloudinitDump)
	h.handle(mux, "PUT /nodes/{node}/qemu/{vmid}/resize", h.putQemuResize)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/move_disk", h.postQemuMoveDisk)
	h.handle(mux, "PUT /nodes/{node}/qemu/{vmid}/unlink", h.putQemuUnlink)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/template", h.postQemuTemplate)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/clone", h.postQemuClone)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/migrate", h.getQemuMigrate)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/migrate", h.postQemuMigrate)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/status", h.getQemuStatusIndex)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/status/current", h.getQemuStatusCurrent)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/rrddata", h.getQemuRRDData)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/status/{action}", h.postQemuStatus)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/snapshot", h.getQemuSnapshots)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/snapshot", h.postQemuSnapshot)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/snapshot/{snapname}", h.getQemuSnapshotIndex)
	h.handle(mux, "DELETE /nodes/{node}/qemu/{vmid}/snapshot/{snapname}", h.deleteQemuSnapshot)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback", h.postQemuRollback)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config", h.getQemuSnapshotConfig)
	h.handle(mux, "PUT /nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config", h.putQemuSnapshotConfig)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/vncproxy", h.postQemuVNCProxy)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/termproxy", h.postQemuTermProxy)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/vncwebsocket", h.getQemuVNCWebsocket)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/agent", h.getAgentIndex)
	h.handle(mux, "GET /nodes/{node}/qemu/{vmid}/agent/{command}", h.getAgent)
	h.handle(mux, "POST /nodes/{node}/qemu/{vmid}/agent/{command}", h.getAgent)
	return mux
}
