package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// request is one API call being served.
type request struct {
	r  *http.Request
	w  http.ResponseWriter
	p  params
	id identity
	c  *kube.Cluster
	// checks are the permissions the route required; a 403 from
	// Kubernetes is reported against them, as PVE words it.
	checks []check
	// reviewed are the accesses already asked of the apiserver for this
	// request.
	reviewed map[kube.Access]bool
	// path holds the values of the route's wildcards (pathValue).
	path pathValues
	// vm is the path's {vmid} once resolved (vmResolved; see pathVM).
	vm         pathVM
	vmResolved bool

	// context is what ctx returns, made on its first call (ready) from
	// the client's: bound to the cluster's health when health is set,
	// limited to requestTimeout when timeout is; cancel and unbind end
	// those.
	context         context.Context
	ready           bool
	health, timeout bool
	cancel, unbind  context.CancelFunc
}

// ctx is the context of the request's cluster calls: the client's, bound
// to the cluster's health (withCluster) and limited to the request
// timeout, both on first use: most reads are answered from the caches
// and never ask, and pay for neither.
func (q *request) ctx() context.Context {
	if !q.ready {
		q.ready = true
		if q.health {
			q.context, q.unbind = q.c.BindHealth(q.context)
		}
		if q.timeout {
			q.context, q.cancel = context.WithTimeout(q.context, requestTimeout)
		}
	}
	return q.context
}

// pathValue is the value of the path's {name}, unescaped.
func (q *request) pathValue(name string) string { return q.path.get(name) }

// end releases the request's context.
func (q *request) end() {
	if q.cancel != nil {
		q.cancel()
	}
	if q.unbind != nil {
		q.unbind()
	}
}

// pathVM is the VM a path's {vmid} names.
type pathVM struct {
	id    int
	idErr error // {vmid} is not a vmid
	g     kube.Guest
	err   error // no such VM (kube.ErrNotFound), or an ambiguous vmid
}

// pathVM resolves the path's {vmid} once per request, so that the
// permission check and the endpoint act on the same VM and pay for one
// lookup.
func (q *request) pathVM() *pathVM {
	if !q.vmResolved {
		q.vmResolved = true
		v := &q.vm
		v.id, v.idErr = translate.ParseVMID(q.pathValue("vmid"))
		if v.idErr == nil {
			v.g, v.err = q.c.Guest(v.id)
			if errors.Is(v.err, kube.ErrNotFound) {
				// Another replica may have made it an instant ago. Only
				// a miss makes the request's context (ctx).
				v.g, v.err = q.c.GuestFresh(q.ctx(), v.id)
			}
		}
	}
	return &q.vm
}

// result is an endpoint's answer: data plus optional top-level keys.
type result struct {
	data  any
	extra map[string]any
}

// endpoint serves one method+path. It returns the data to wrap in the
// envelope, or an error to answer PVE-style.
type endpoint func(q *request) (any, *apiError)

// route is one endpoint of the API with all the router knows of it.
type route struct {
	method string
	// path is under /api2/json, with http.ServeMux wildcards.
	path  string
	serve endpoint
	// needs are the privileges checked before serve runs; signedIn when
	// authentication is all (the endpoint filters what it shows). Public
	// routes have none, and never run any.
	needs needFunc
	flags routeFlags
}

// routeFlags say how a route is served.
type routeFlags uint8

const (
	// public routes answer without authentication: login and its realms.
	public routeFlags = 1 << iota
	// clusterFree routes need nothing from the cluster, so they answer
	// during an outage too: the version, the indexes and login (tickets
	// are signed locally).
	clusterFree
	// session routes take the connection over for as long as it lasts (the
	// console websocket): no request timeout, no end at an outage, and
	// serve answers by itself unless it fails before taking over.
	session
	// streamed routes take a request body that streams for as long as it
	// takes (uploads): no request timeout. The body is neither bounded nor
	// read as parameters (isUploadPath, decided before routing).
	streamed
)

// signedIn is the needs of routes open to every authenticated caller.
func signedIn(*APIHandler, *request) []check { return nil }

// requestTimeout bounds the cluster calls one API request makes.
const requestTimeout = 20 * time.Second

// serve answers one route: parameters, authentication, the cluster's
// health, the caller's identity and privileges, then the endpoint.
func (h *APIHandler) serve(rt *boundRoute, q *request) {
	w, r := q.w, q.r
	p, perr := parseParams(r)
	if perr == nil {
		perr = p.fromPath(&q.path)
	}
	if perr != nil {
		writeError(w, r, perr)
		return
	}
	// Every cluster call is bounded (ctx): a hung apiserver makes a 503,
	// never a request that hangs with it. Sessions and uploads last as
	// long as they take.
	q.p, q.c, q.context, q.timeout = p, h.cluster, r.Context(), rt.flags&(session|streamed) == 0
	defer q.end()
	if rt.flags&public == 0 {
		id, aerr := h.auth.authenticate(r)
		if aerr != nil {
			h.failAuth(w, r, aerr)
			return
		}
		q.id = id
	}
	// During an outage answer 503 at once, before any access review.
	if e := withCluster(q, rt.flags, h.staleReads()); e != nil {
		writeError(w, r, e)
		return
	}
	if rt.flags&public == 0 {
		if e := h.admit(q, rt.needs); e != nil {
			writeError(w, q.r, e)
			return
		}
	}
	data, e := rt.serve(q)
	switch {
	case e != nil && e.authFailed:
		h.failAuth(w, q.r, e)
	case e != nil:
		if e.kubeDenied && len(q.checks) > 0 {
			// Kubernetes refused the impersonated call: its RBAC is finer
			// than the review or changed since.
			h.logger.Info("kubernetes refused the caller", zap.String("user", q.id.ID()), zap.String("detail", e.Message))
			e = permErr(vmCheck(q.checks))
		}
		writeError(w, q.r, e)
	case rt.flags&session != 0:
		// The session answered on the connection it took over.
	default:
		if res, ok := data.(result); ok {
			writeData(w, res.data, res.extra)
			return
		}
		writeData(w, data, nil)
	}
}

// admit acts as the caller and checks the route's needs of them.
func (h *APIHandler) admit(q *request, needs needFunc) *apiError {
	if e := h.actAs(q); e != nil {
		return e
	}
	// Everyone is Administrator in the default configuration: nothing to
	// check, and no lookups spent on it.
	if h.perms.allAdmin || h.auth.noAuth {
		return nil
	}
	q.checks = needs(h, q)
	return h.authorize(q, q.checks)
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

// routeTable is the API's whole surface: every path PVE clients use and
// this server answers, with the privileges each needs (as PVE's API schema
// declares them).
func (h *APIHandler) routeTable() []route {
	return []route{
		{"GET", "/", h.getRoot, signedIn, clusterFree},
		{"GET", "/version", h.getVersion, signedIn, clusterFree},

		// access
		{"GET", "/access", h.getAccessIndex, signedIn, clusterFree},
		{"GET", "/access/ticket", h.getTicket, nil, public | clusterFree},
		{"POST", "/access/ticket", h.postTicket, nil, public | clusterFree},
		{"GET", "/access/domains", h.getDomains, nil, public | clusterFree},
		{"GET", "/access/domains/{realm}", h.getDomain, signedIn, 0},
		{"GET", "/access/users", h.getUsers, signedIn, 0},
		{"GET", "/access/users/{userid}", h.getUser, signedIn, 0},
		{"GET", "/access/groups", h.getGroups, signedIn, 0},
		{"GET", "/access/groups/{groupid}", h.getGroup, signedIn, 0},
		{"GET", "/access/roles", h.getRoles, signedIn, 0},
		{"GET", "/access/roles/{roleid}", h.getRole, signedIn, 0},
		{"GET", "/access/acl", h.getACL, signedIn, 0},
		{"GET", "/access/permissions", h.getPermissions, signedIn, 0},

		// cluster
		{"GET", "/cluster", h.getClusterIndex, signedIn, 0},
		{"GET", "/cluster/resources", h.getClusterResources, signedIn, 0},
		{"GET", "/cluster/status", h.getClusterStatus, signedIn, 0},
		{"GET", "/cluster/nextid", h.getNextID, signedIn, 0},
		{"GET", "/cluster/tasks", h.getClusterTasks, signedIn, 0},
		{"GET", "/cluster/ha", h.getHAIndex, signedIn, 0},
		{"GET", "/cluster/ha/groups", h.emptyList, signedIn, 0},
		{"GET", "/cluster/ha/resources", h.getHAResources, rootNeeds("Sys.Audit"), 0},
		{"POST", "/cluster/ha/resources", h.postHAResource, rootNeeds("Sys.Console"), 0},
		{"GET", "/cluster/ha/resources/{sid}", h.getHAResource, rootNeeds("Sys.Audit"), 0},
		{"PUT", "/cluster/ha/resources/{sid}", h.putHAResource, rootNeeds("Sys.Console"), 0},
		{"DELETE", "/cluster/ha/resources/{sid}", h.deleteHAResource, rootNeeds("Sys.Console"), 0},
		{"GET", "/cluster/ha/status/current", h.getHAStatus, rootNeeds("Sys.Audit"), 0},

		// pools and storage
		{"GET", "/pools", h.getPools, signedIn, 0},
		{"POST", "/pools", h.postPool, poolNeeds, 0},
		{"PUT", "/pools", h.putPool, poolUpdateNeeds, 0},
		{"DELETE", "/pools", h.deletePool, poolNeeds, 0},
		{"GET", "/pools/{poolid}", h.getPool, poolAuditNeeds, 0},
		{"PUT", "/pools/{poolid}", h.putPool, poolUpdateNeeds, 0},
		{"DELETE", "/pools/{poolid}", h.deletePool, poolNeeds, 0},
		{"GET", "/storage", h.getStorageConfig, signedIn, 0},
		{"GET", "/storage/{storage}", h.getStorageConfigOne, storageNeeds("Datastore.Audit", "Datastore.AllocateSpace"), 0},

		// nodes
		{"GET", "/nodes", h.getNodes, signedIn, 0},
		{"GET", "/nodes/{node}", h.getNodeIndex, signedIn, 0},
		{"GET", "/nodes/{node}/status", h.getNodeStatus, nodeNeeds("Sys.Audit"), 0},
		{"GET", "/nodes/{node}/rrddata", h.getNodeRRDData, nodeNeeds("Sys.Audit"), 0},
		{"GET", "/nodes/{node}/version", h.getNodeVersion, signedIn, 0},
		{"GET", "/nodes/{node}/time", h.getNodeTime, signedIn, 0},
		{"GET", "/nodes/{node}/dns", h.getNodeDNS, nodeNeeds("Sys.Audit"), 0},
		{"GET", "/nodes/{node}/hosts", h.getNodeHosts, nodeNeeds("Sys.Audit"), 0},
		{"GET", "/nodes/{node}/network", h.getNodeNetwork, nodeNeeds("Sys.Audit"), 0},
		{"GET", "/nodes/{node}/storage", h.getNodeStorage, signedIn, 0},
		{"GET", "/nodes/{node}/storage/{storage}/status", h.getNodeStorageStatus, storageNeeds("Datastore.Audit", "Datastore.AllocateSpace"), 0},
		{"GET", "/nodes/{node}/storage/{storage}/content", h.getStorageContent, storageNeeds("Datastore.Audit", "Datastore.AllocateSpace"), 0},
		{"GET", "/nodes/{node}/storage/{storage}/content/{volume}", h.getStorageVolume, storageNeeds("Datastore.Audit", "Datastore.AllocateSpace"), 0},
		// {volume...}: proxmoxer and Ansible send local:iso/x.iso unescaped,
		// and PVE takes the rest of the path as the volume.
		{"DELETE", "/nodes/{node}/storage/{storage}/content/{volume...}", h.deleteStorageVolume, volumeDeleteNeeds, 0},
		{"POST", "/nodes/{node}/storage/{storage}/download-url", h.postDownloadURL, downloadNeeds, 0},
		{"POST", "/nodes/{node}/storage/{storage}/upload", h.postUpload, uploadNeeds, streamed},
		{"GET", "/nodes/{node}/query-url-metadata", h.getQueryURLMetadata, queryURLNeeds, 0},
		{"GET", "/nodes/{node}/lxc", h.getNodeLXC, signedIn, 0},
		{"GET", "/nodes/{node}/tasks", h.getNodeTasks, signedIn, 0},
		{"GET", "/nodes/{node}/tasks/{upid}", h.getTaskIndex, signedIn, 0},
		{"GET", "/nodes/{node}/tasks/{upid}/status", h.getTaskStatus, signedIn, 0},
		{"GET", "/nodes/{node}/tasks/{upid}/log", h.getTaskLog, signedIn, 0},
		{"DELETE", "/nodes/{node}/tasks/{upid}", h.deleteTask, signedIn, 0},

		// qemu
		{"GET", "/nodes/{node}/qemu", h.getQemuList, signedIn, 0},
		{"POST", "/nodes/{node}/qemu", h.postQemu, createNeeds, 0},
		{"GET", "/nodes/{node}/qemu/{vmid}", h.getQemuIndex, vmNeeds("VM.Audit"), 0},
		{"DELETE", "/nodes/{node}/qemu/{vmid}", h.deleteQemu, vmNeeds("VM.Allocate"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/config", h.getQemuConfig, vmNeeds("VM.Audit"), 0},
		{"PUT", "/nodes/{node}/qemu/{vmid}/config", h.putQemuConfig, configNeeds, 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/config", h.postQemuConfig, configNeeds, 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/pending", h.getQemuPending, vmNeeds("VM.Audit"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/cloudinit", h.getQemuCloudinit, vmNeeds("VM.Audit"), 0},
		{"PUT", "/nodes/{node}/qemu/{vmid}/cloudinit", h.putQemuCloudinit, vmNeeds(translate.PrivConfigCloudinit), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/cloudinit/dump", h.getQemuCloudinitDump, vmNeeds("VM.Audit"), 0},
		{"PUT", "/nodes/{node}/qemu/{vmid}/resize", h.putQemuResize, vmNeeds(translate.PrivConfigDisk), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/move_disk", h.postQemuMoveDisk, moveDiskNeeds, 0},
		{"PUT", "/nodes/{node}/qemu/{vmid}/unlink", h.putQemuUnlink, unlinkNeeds, 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/template", h.postQemuTemplate, vmNeeds("VM.Allocate"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/clone", h.postQemuClone, cloneNeeds, 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/migrate", h.getQemuMigrate, vmNeeds("VM.Migrate"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/migrate", h.postQemuMigrate, migrateNeeds, 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/status", h.getQemuStatusIndex, vmNeeds("VM.Audit"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/status/current", h.getQemuStatusCurrent, vmNeeds("VM.Audit"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/rrddata", h.getQemuRRDData, vmNeeds("VM.Audit"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/status/{action}", h.postQemuStatus, vmNeeds("VM.PowerMgmt"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/feature", h.getQemuFeature, vmNeeds("VM.Audit"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/snapshot", h.getQemuSnapshots, vmNeeds("VM.Audit"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/snapshot", h.postQemuSnapshot, vmNeeds("VM.Snapshot"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}", h.getQemuSnapshotIndex, vmNeeds("VM.Audit"), 0},
		{"DELETE", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}", h.deleteQemuSnapshot, vmNeeds("VM.Snapshot"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback", h.postQemuRollback, vmNeeds("VM.Snapshot", "VM.Snapshot.Rollback"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config", h.getQemuSnapshotConfig, vmNeeds("VM.Audit"), 0},
		{"PUT", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config", h.putQemuSnapshotConfig, vmNeeds("VM.Snapshot"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/vncproxy", h.postQemuVNCProxy, vmNeeds("VM.Console"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/termproxy", h.postQemuTermProxy, vmNeeds("VM.Console"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/vncwebsocket", h.getQemuVNCWebsocket, vmNeeds("VM.Console"), session},
		{"GET", "/nodes/{node}/qemu/{vmid}/agent", h.getAgentIndex, vmNeeds("VM.Monitor"), 0},
		{"GET", "/nodes/{node}/qemu/{vmid}/agent/{command}", h.getAgent, vmNeeds("VM.Monitor"), 0},
		{"POST", "/nodes/{node}/qemu/{vmid}/agent/{command}", h.getAgent, vmNeeds("VM.Monitor"), 0},
	}
}

// routes builds the router over the route table.
func (h *APIHandler) routes() *router { return newRouter(h.routeTable()) }
