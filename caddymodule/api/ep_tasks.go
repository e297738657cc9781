package api

import (
	"errors"
	"math"
	"net/http"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
)

// taskStatus is GET …/tasks/{upid}/status. exitstatus is absent while the
// task runs: Telmate treats its mere presence as "ended".
type taskStatus struct {
	UPID       string `json:"upid"`
	Node       string `json:"node"`
	PID        uint32 `json:"pid"`
	PStart     uint32 `json:"pstart"`
	StartTime  int64  `json:"starttime"`
	Type       string `json:"type"`
	ID         string `json:"id"`
	User       string `json:"user"`
	TokenID    string `json:"tokenid,omitempty"`
	Status     string `json:"status"`
	ExitStatus string `json:"exitstatus,omitempty"`
}

// taskRow is a row of /nodes/{n}/tasks: status carries the exit status
// of ended tasks.
type taskRow struct {
	UPID      string `json:"upid"`
	Node      string `json:"node"`
	PID       uint32 `json:"pid"`
	PStart    uint32 `json:"pstart"`
	StartTime int64  `json:"starttime"`
	EndTime   int64  `json:"endtime,omitempty"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	User      string `json:"user"`
	Status    string `json:"status,omitempty"`
}

func splitUser(u string) (user, token string) {
	for i := 0; i < len(u); i++ {
		if u[i] == '!' {
			return u[:i], u[i+1:]
		}
	}
	return u, ""
}

func (h *APIHandler) task(q *request) (*kube.Task, *apiError) {
	node := q.pathValue("node")
	t, err := q.c.Tasks.Get(q.ctx(), q.pathValue("upid"))
	if errors.Is(err, kube.ErrNoSuchTask) || (err == nil && t.UPID.Node != node) {
		return nil, paramErr("upid", "no such task")
	}
	if err != nil {
		return nil, newError(http.StatusServiceUnavailable, "reading task: %v", err)
	}
	if !h.mayTask(q, t) {
		return nil, taskForbidden(t)
	}
	return t, nil
}

func (h *APIHandler) getTaskIndex(q *request) (any, *apiError) {
	if _, e := h.task(q); e != nil {
		return nil, e
	}
	return []map[string]string{{"name": "log"}, {"name": "status"}}, nil
}

func (h *APIHandler) getTaskStatus(q *request) (any, *apiError) {
	t, e := h.task(q)
	if e != nil {
		return nil, e
	}
	user, token := splitUser(t.UPID.User)
	st := taskStatus{
		UPID: t.UPID.String(), Node: t.UPID.Node, PID: t.UPID.PID, PStart: t.UPID.PStart,
		StartTime: t.UPID.StartTime, Type: t.UPID.Type, ID: t.UPID.ID, User: user, TokenID: token,
		Status: t.Status,
	}
	if !t.Running() {
		st.ExitStatus = t.ExitStatus
	}
	return st, nil
}

// deleteTask stops a task, as pve-manager's DELETE …/tasks/{upid} does:
// its owner may, anyone else needs Sys.Modify on the node. A running task
// ends at once as PVE's interrupted worker does ("received interrupt");
// what it waited for is not waited for any longer, and a clone's half-made
// VM is removed (as on any failed clone). A task that has ended is left
// as it is.
func (h *APIHandler) deleteTask(q *request) (any, *apiError) {
	t, e := h.task(q)
	if e != nil {
		return nil, e
	}
	if !h.perms.allAdmin && !h.auth.noAuth && !ownsTask(q, t) && !h.sees(q, "/nodes/"+t.UPID.Node, "", "", "Sys.Modify") {
		return nil, newError(http.StatusForbidden, "Permission check failed (/nodes/%s, Sys.Modify)", t.UPID.Node)
	}
	if t.Running() {
		q.c.Tasks.Interrupt(q.ctx(), t.UPID.String())
	}
	return nil, nil
}

// getTaskLog pages the log as [{n,t}] with the line count in total.
func (h *APIHandler) getTaskLog(q *request) (any, *apiError) {
	t, e := h.task(q)
	if e != nil {
		return nil, e
	}
	start, limit, e := paging(q)
	if e != nil {
		return nil, e
	}
	type line struct {
		N int    `json:"n"`
		T string `json:"t"`
	}
	out := []line{}
	for i := int(start); i < len(t.Log) && len(out) < int(limit); i++ {
		out = append(out, line{N: i + 1, T: t.Log[i]})
	}
	return result{data: out, extra: map[string]any{"total": len(t.Log)}}, nil
}

func taskRows(ts []*kube.Task, start, limit int, vmid, typ string, errorsOnly bool) ([]taskRow, int) {
	out := []taskRow{}
	n := 0
	for _, t := range ts {
		if (vmid != "" && t.UPID.ID != vmid) || (typ != "" && t.UPID.Type != typ) {
			continue
		}
		if errorsOnly && (t.Running() || t.ExitStatus == "OK") {
			continue
		}
		n++
		if n <= start || len(out) >= limit {
			continue
		}
		row := taskRow{
			UPID: t.UPID.String(), Node: t.UPID.Node, PID: t.UPID.PID, PStart: t.UPID.PStart,
			StartTime: t.UPID.StartTime, Type: t.UPID.Type, ID: t.UPID.ID, User: t.UPID.User,
		}
		if !t.Running() {
			row.Status = t.ExitStatus
			row.EndTime = t.EndTime.Unix()
		}
		out = append(out, row)
	}
	return out, n
}

func (h *APIHandler) getNodeTasks(q *request) (any, *apiError) {
	n, e := h.node(q)
	if e != nil {
		return nil, e
	}
	start, limit, e := paging(q)
	if e != nil {
		return nil, e
	}
	errorsOnly, e := q.p.boolean("errors", false)
	if e != nil {
		return nil, e
	}
	rows, total := taskRows(h.visibleTasks(q, q.c.Tasks.List(n.Name)), int(start), int(limit), q.p["vmid"], q.p["typefilter"], errorsOnly)
	return result{data: rows, extra: map[string]any{"total": total}}, nil
}

func (h *APIHandler) getClusterTasks(q *request) (any, *apiError) {
	rows, _ := taskRows(h.visibleTasks(q, q.c.Tasks.List("")), 0, 1000, "", "", false)
	return rows, nil
}

// paging reads PVE's start= and limit= (default 50).
func paging(q *request) (start, limit int64, e *apiError) {
	if start, e = q.p.integer("start", 0, 0, math.MaxInt32); e != nil {
		return 0, 0, e
	}
	limit, e = q.p.integer("limit", 50, 0, math.MaxInt32)
	return start, limit, e
}
