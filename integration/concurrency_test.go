package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// TestConcurrentCreatesSameVMID: of N creates racing for one vmid (with
// different names, through both instances: two caches, one apiserver),
// exactly one succeeds and its task ends OK; the others get qemu-server's
// "unable to create VM <id> - VM <id> already exists on node '<node>'",
// and exactly one VirtualMachine carries the id.
// The id is free again once that VM is deleted.
func TestConcurrentCreatesSameVMID(t *testing.T) {
	const n = 8
	a, b := pve(t), fallbackPVE(t)
	node := firstNode(a)
	id := nextID(a)
	type outcome struct {
		code   int
		status string
		upid   string
	}
	out := make([]outcome, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := a
			if i%2 == 1 {
				c = b
			}
			c = &testcaddy.PVE{T: t, Base: c.Base, C: testcaddy.Client(), Auth: c.Auth}
			<-start
			ans, err := c.Send("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", fmt.Sprintf("race-%d", i)))
			if err != nil {
				out[i] = outcome{status: err.Error()}
				return
			}
			out[i] = outcome{code: ans.Code, status: ans.Status}
			if ans.Code == 200 {
				_ = jsonString(ans.Data, &out[i].upid)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	var won []string
	for i, o := range out {
		switch {
		case o.code == 200:
			won = append(won, o.upid)
		case o.code == 500 && o.status == "500 unable to create VM "+id+" - VM "+id+" already exists on node '"+node+"'":
		default:
			t.Errorf("create %d: %s", i, o.status)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d creates of vmid %s succeeded, want exactly 1: %+v", len(won), id, out)
	}
	if exit := a.WaitTask(won[0]); exit != "OK" {
		t.Fatalf("winning create: %s", exit)
	}
	list, err := env.KubeVirt.KubevirtV1().VirtualMachines("").List(context.Background(), metav1.ListOptions{LabelSelector: translate.LabelVMID + "=" + id})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("VirtualMachines with vmid %s: %d (%v)", id, len(list.Items), err)
	}
	var upid string
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("delete: %s", exit)
	}
	// The claim ended with its VM: the id can be used again at once.
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "race-again"), &upid)
	if exit := a.WaitTask(upid); exit != "OK" {
		t.Fatalf("create after delete: %s", exit)
	}
	a.OK("DELETE", "/nodes/"+node+"/qemu/"+id, nil, &upid)
	a.WaitTask(upid)
}

// TestConcurrentNextIDCreates: clients that each ask /cluster/nextid for
// a free id and create the VM at once, then delete it (so that ids are
// freed and taken again while the cache catches up), never meet at one
// id: every create succeeds, none answers "already exists" (which bpg
// reads as done: it would go on with another client's VM).
func TestConcurrentNextIDCreates(t *testing.T) {
	const workers, rounds = 6, 3
	a := pve(t)
	node := firstNode(a)
	var (
		mu   sync.Mutex
		errs []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := &testcaddy.PVE{T: t, Base: a.Base, C: testcaddy.Client(), Auth: a.Auth}
			for r := 0; r < rounds; r++ {
				var id, upid string
				ans, err := c.Send("GET", "/cluster/nextid", nil)
				if err != nil || ans.Code != 200 || jsonString(ans.Data, &id) != nil {
					fail("worker %d: nextid: %v %s", w, err, ans.Raw)
					return
				}
				ans, err = c.Send("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", fmt.Sprintf("nextid-%d-%d", w, r)))
				if err != nil || ans.Code != 200 {
					fail("worker %d: create of vmid %s: %v %s", w, id, err, ans.Status)
					return
				}
				_ = jsonString(ans.Data, &upid)
				if exit := sendWaitTask(c, upid); exit != "OK" {
					fail("worker %d: create task of %s: %s", w, id, exit)
				}
				ans, err = c.Send("DELETE", "/nodes/"+node+"/qemu/"+id, nil)
				if err != nil || ans.Code != 200 {
					fail("worker %d: delete of vmid %s: %v %s", w, id, err, ans.Status)
					return
				}
				_ = jsonString(ans.Data, &upid)
				if exit := sendWaitTask(c, upid); exit != "OK" {
					fail("worker %d: delete task of %s: %s", w, id, exit)
				}
			}
		}(w)
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	list, err := env.KubeVirt.KubevirtV1().VirtualMachines("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range list.Items {
		if strings.HasPrefix(vm.Name, "nextid-") && vm.DeletionTimestamp == nil {
			t.Errorf("VM %s (vmid %s) was left behind", vm.Name, vm.Labels[translate.LabelVMID])
		}
	}
}

// TestNextIDSkipsCheckedIDs: an id a client was told is free with
// nextid?vmid= (bpg's sequential ids) is not offered to a client asking
// for any free id before its VM exists (PVE's nextid has no such hold;
// there the create follows within milliseconds, here the cache may lag).
// A check does not refuse an id only offered: a client that got it from
// nextid may check it (bpg does, after a lost race).
func TestNextIDSkipsCheckedIDs(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	offered, err := strconv.Atoi(nextID(a))
	if err != nil {
		t.Fatal(err)
	}
	if ans := a.Do("GET", "/cluster/nextid", form("vmid", strconv.Itoa(offered))); ans.Code != 200 {
		t.Fatalf("checking the id nextid offered: %s", ans.Status)
	}
	// The next free id after it: one an earlier test's VM still holds
	// (being deleted) is refused, as PVE's check refuses a taken id.
	checked := ""
	for id := offered + 1; checked == "" && id < offered+100; id++ {
		if ans := a.Do("GET", "/cluster/nextid", form("vmid", strconv.Itoa(id))); ans.Code == 200 {
			checked = strconv.Itoa(id)
		}
	}
	if checked == "" {
		t.Fatalf("no id after %d checks as free", offered)
	}
	if id := nextID(a); id == checked || id == strconv.Itoa(offered) {
		t.Fatalf("nextid offered %s, an id already given out (%d, %s)", id, offered, checked)
	}
	createVM(t, a, node, checked, "name", "checked-id")
	ans := a.Do("POST", "/nodes/"+node+"/qemu", form("vmid", checked, "name", "checked-id-2"))
	if want := "unable to create VM " + checked + " - VM " + checked + " already exists on node '" + node + "'"; ans.Code != 500 || ans.Message != want+"\n" && ans.Message != want {
		t.Fatalf("second create of %s: %s %q", checked, ans.Status, ans.Message)
	}
}

// sendWaitTask is WaitTask for any goroutine: it returns the exit status,
// or what went wrong.
func sendWaitTask(c *testcaddy.PVE, upid string) string {
	parts := strings.Split(upid, ":")
	if len(parts) != 9 {
		return "bad UPID " + upid
	}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ans, err := c.Send("GET", "/nodes/"+parts[1]+"/tasks/"+upid+"/status", nil)
		if err != nil {
			return err.Error()
		}
		var st map[string]any
		if err := json.Unmarshal(ans.Data, &st); err != nil {
			return fmt.Sprintf("%s %s", ans.Status, ans.Raw)
		}
		if st["status"] == "stopped" {
			exit, _ := st["exitstatus"].(string)
			return exit
		}
	}
	return "task " + upid + " did not end"
}

// TestConcurrentPowerActions: start, stop, shutdown and reboot fired at
// one VM at once, in rounds: every call answers (a UPID or a PVE error),
// every task ends, and afterwards status/current agrees with the
// VirtualMachineInstance.
func TestConcurrentPowerActions(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "power-race"), &upid)
	a.WaitTask(upid)
	path := "/nodes/" + node + "/qemu/" + id
	actions := []string{"start", "stop", "reboot", "shutdown", "start", "stop"}
	for round := 0; round < 3; round++ {
		var mu sync.Mutex
		var upids []string
		var wg sync.WaitGroup
		for _, act := range actions {
			wg.Add(1)
			go func(act string) {
				defer wg.Done()
				c := &testcaddy.PVE{T: t, Base: a.Base, C: testcaddy.Client(), Auth: a.Auth}
				f := form()
				if act == "shutdown" {
					f = form("timeout", "5")
				}
				ans, err := c.Send("POST", path+"/status/"+act, f)
				switch {
				case err != nil:
					t.Errorf("%s: %v", act, err)
				case ans.Code == 200:
					var u string
					_ = jsonString(ans.Data, &u)
					mu.Lock()
					upids = append(upids, act+" "+u)
					mu.Unlock()
				case ans.Code >= 400 && ans.Code < 600 && ans.Code != 503 && ans.Message != "":
					// A PVE refusal (e.g. "VM x not running"), fine under a race.
				default:
					t.Errorf("%s: %s %s", act, ans.Status, ans.Raw)
				}
			}(act)
		}
		wg.Wait()
		for _, u := range upids {
			act, up, _ := strings.Cut(u, " ")
			exit := a.WaitTask(up)
			t.Logf("round %d: %s ended %q", round, act, exit)
		}
		// Settled: status/current says what the cluster has.
		deadline := time.Now().Add(30 * time.Second)
		for {
			st := a.Status(node, id)
			vm := vmByID(t, id)
			vmi, err := env.KubeVirt.KubevirtV1().VirtualMachineInstances(vm.Namespace).Get(context.Background(), vm.Name, metav1.GetOptions{})
			clusterRunning := err == nil && vmi.Status.Phase == "Running" && vmi.DeletionTimestamp == nil
			if (st["status"] == "running") == clusterRunning {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: status/current %v disagrees with the instance (running=%v)", round, st["status"], clusterRunning)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var tasks []map[string]any
	a.OK("GET", "/nodes/"+node+"/tasks", form("vmid", id, "source", "active"), &tasks)
	for _, tk := range tasks {
		if tk["endtime"] == nil {
			t.Errorf("task still running: %v", tk)
		}
	}
	a.OK("POST", path+"/status/stop", nil, &upid)
	a.WaitTask(upid)
	a.OK("DELETE", path, nil, &upid)
	a.WaitTask(upid)
}

// TestConcurrentStartsOnVirtAPI: starts fired at one stopped VM at once
// race in KubeVirt's virt-api, whose start patches the VM with a test of
// what it read; on this apiserver a lost race comes back as a 500
// "Internal error occurred: the server rejected our request …". Every
// start answers a UPID, and every task ends OK or with PVE's words for a
// VM another start got to first, never with virt-api's raw text.
func TestConcurrentStartsOnVirtAPI(t *testing.T) {
	a := pve(t)
	node := firstNode(a)
	id := nextID(a)
	path := "/nodes/" + node + "/qemu/" + id
	var upid string
	a.OK("POST", "/nodes/"+node+"/qemu", form("vmid", id, "name", "start-race"), &upid)
	a.WaitTask(upid)
	t.Cleanup(func() {
		var u string
		a.OK("POST", path+"/status/stop", nil, &u)
		a.WaitTask(u)
		a.OK("DELETE", path, nil, &u)
		a.WaitTask(u)
	})
	const n = 6
	for round := 0; round < 3; round++ {
		upids := make([]string, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range upids {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				c := &testcaddy.PVE{T: t, Base: a.Base, C: testcaddy.Client(), Auth: a.Auth}
				<-start
				ans, err := c.Send("POST", path+"/status/start", nil)
				switch {
				case err != nil:
					t.Errorf("start %d: %v", i, err)
				case ans.Code == 200:
					_ = jsonString(ans.Data, &upids[i])
				case ans.Code == 500 && ans.Message == "VM "+id+" already running\n":
				default:
					t.Errorf("start %d: %s %s", i, ans.Status, ans.Raw)
				}
			}(i)
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, u := range upids {
			if u == "" {
				continue
			}
			switch exit := a.WaitTask(u); exit {
			case "OK":
				ok++
			case "VM " + id + " already running":
			default:
				t.Errorf("round %d: a start ended %q", round, exit)
			}
		}
		if ok == 0 {
			t.Errorf("round %d: no start ended OK", round)
		}
		a.OK("POST", path+"/status/stop", nil, &upid)
		if exit := a.WaitTask(upid); exit != "OK" {
			t.Fatalf("round %d: stop: %s", round, exit)
		}
	}
}
