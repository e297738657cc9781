package kube

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// ownUsers are the functions that call the cluster with the plugin's own
// clients (Cluster.own) rather than the caller's (as(ctx)), and why. A
// new use must be added here on purpose: a slip would bypass
// impersonation.
var ownUsers = map[string]string{
	"Cluster.Start":                 "informers: one cache for every caller",
	"Cluster.labelledConfigMaps":    "informers of the plugin's own records (tasks, pools, vmid claims)",
	"Cluster.startCDIStore":         "informer and API discovery",
	"Cluster.startMigrationStore":   "informer and its list probe",
	"Cluster.startSnapshotStores":   "informers and API discovery",
	"Cluster.startMetrics":          "metrics.k8s.io poller: one cache for every caller",
	"Cluster.lookUpVMID":            "a VM another replica made, into the cache the informer would fill: one cache for every caller",
	"Cluster.lookUpVM":              "a VM whose making another replica ended, into the cache the informer would fill: one cache for every caller",
	"Cluster.lookUpVMI":             "the instance of a VM whose start or stop another replica ended, into the cache the informer would fill: one cache for every caller",
	"apiMetricsSource.get":          "metrics.k8s.io poller: one cache for every caller",
	"power.detect":                  "API discovery",
	"Cluster.as":                    "the plugin's clients when no identity is carried",
	"Cluster.clientsFor":            "impersonating clients are built from own.cfg",
	"Cluster.CreateFile":            "existence checks: a file the caller cannot see is still refused",
	"Cluster.FileTransferred":       "the plugin's record of a transfer it made and checked",
	"Cluster.DropFile":              "removing a transfer the plugin made and that failed",
	"Cluster.WaitFileGone":          "a file being replaced: the apiserver's view, whoever may read it",
	"Cluster.uploadProxy":           "finding CDI's upload proxy and its CA, once (the token is the caller's)",
	"Cluster.filesystemOverhead":    "CDI's cluster configuration (CDIConfig), which callers are not given; the claim is written as the caller",
	"Cluster.FeatureGate":           "KubeVirt's cluster configuration (the KubeVirt CR), which callers are not given",
	"Cluster.VolumeNameTaken":       "a claim the caller cannot read still takes the name",
	"Cluster.DeletePool":            "the namespace read for the guarded delete, as documented",
	"Cluster.CreatePoolRecord":      "pool records: the plugin's (the caller's Pool.Allocate is reviewed first)",
	"Cluster.UpdatePoolRecord":      "pool records: the plugin's (the caller's Pool.Allocate is reviewed first)",
	"Cluster.DeletePoolRecord":      "pool records: the plugin's (the caller's Pool.Allocate is reviewed first)",
	"Cluster.poolContents":          "objects the caller cannot see keep the namespace too",
	"Cluster.going":                 "part of poolContents",
	"Cluster.reapplySnapshotConfig": "task judging, after the request ended, on any replica",
	"Cluster.claimVMID":             "vmid claims: the plugin's records",
	"Cluster.claimLive":             "a claim's VM may be one the caller cannot read",
	"Cluster.StateClaim":            "finding KubeVirt's state claim of a VM the caller clones; the copy is the caller's (CDI checks its right to the source)",
	"vmidClaim.commit":              "vmid claims: the plugin's records",
	"vmidClaim.release":             "vmid claims: the plugin's records",
	"Cluster.removeClaim":           "vmid claims: the plugin's records, collected by any replica",
	"Tasks.Begin":                   "task records: the plugin's",
	"Tasks.lookup":                  "task records: the plugin's",
	"Tasks.persist":                 "task records: the plugin's",
	"Tasks.removeClone":             "a failed clone's own VM (UID-guarded), after the request that made it ended",
	"Tasks.endRecorded":             "task records: the plugin's",
	"Tasks.prune":                   "task records: the plugin's",
	"Tasks.AttachSession":           "console session records: task records",
	"Session.update":                "console session records: task records",
}

func TestOwnClientsUsedOnPurpose(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			uses := false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "own" {
					uses = true
				}
				return !uses
			})
			if uses {
				found[funcName(fn)] = true
			}
		}
	}
	var unexpected, gone []string
	for fn := range found {
		if _, ok := ownUsers[fn]; !ok {
			unexpected = append(unexpected, fn)
		}
	}
	for fn := range ownUsers {
		if !found[fn] {
			gone = append(gone, fn)
		}
	}
	sort.Strings(unexpected)
	sort.Strings(gone)
	if len(unexpected) > 0 {
		t.Errorf("functions using the plugin's own clients without a reason in ownUsers (use as(ctx) for what a request asks): %v", unexpected)
	}
	if len(gone) > 0 {
		t.Errorf("ownUsers lists functions that no longer use them: %v", gone)
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
