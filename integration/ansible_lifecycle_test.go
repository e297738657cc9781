package integration

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// playRecap is the PLAY RECAP line of one host.
type playRecap struct {
	ok, changed, unreachable, failed, skipped, rescued, ignored int
}

var recapLine = regexp.MustCompile(`(?m)^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)`)

// parseRecap reads the PLAY RECAP of an ansible-playbook run.
func parseRecap(out string) (playRecap, bool) {
	m := recapLine.FindStringSubmatch(out)
	if m == nil {
		return playRecap{}, false
	}
	n := make([]int, len(m)-1)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return playRecap{n[0], n[1], n[2], n[3], n[4], n[5], n[6]}, true
}

// changedTasks names the tasks that reported changed, in order.
func changedTasks(out string) []string {
	var names []string
	task := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "TASK ["); ok {
			task, _, _ = strings.Cut(rest, "] ")
			task = strings.TrimSuffix(task, "]")
		}
		if strings.HasPrefix(line, "changed: [localhost]") {
			names = append(names, task)
		}
	}
	return names
}

// TestAnsibleLifecycleTwice applies a whole VM life with community.general's
// proxmox_kvm, proxmox_disk, proxmox_nic and proxmox_snap (create with disk,
// NIC and cloud-init, start, update, add disk and NIC, snapshot, stop,
// template, full clone; then stop and remove both) and applies each part a
// second time: a second run must succeed and change nothing.
func TestAnsibleLifecycleTwice(t *testing.T) {
	needTool(t, "ansible-playbook", "--version")
	needTool(t, debianPython, "-c", "import proxmoxer")
	a := pve(t)
	node := firstNode(a)
	vmid := nextID(a)
	id, _ := strconv.Atoi(vmid)
	newid := ""
	for n := id + 1; newid == ""; n++ {
		if a.Do("GET", "/cluster/nextid", form("vmid", strconv.Itoa(n))).Code == 200 {
			newid = strconv.Itoa(n)
		}
	}
	user, tokenName, _ := strings.Cut(tokenID, "!")
	home, tmp := t.TempDir(), t.TempDir()

	run := func(tag string) (string, playRecap, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ansible-playbook", "-i", "localhost,", "-c", "local",
			"clients/ansible_lifecycle.yml", "--tags", tag,
			"-e", "pve_host="+hostPort(), "-e", "pve_user="+user, "-e", "pve_token_name="+tokenName,
			"-e", "pve_token_secret="+tokenSecret, "-e", "pve_node="+node,
			"-e", "vmid="+vmid, "-e", "newid="+newid)
		cmd.Env = append(os.Environ(), "ANSIBLE_PYTHON_INTERPRETER="+debianPython, "ANSIBLE_NOCOLOR=1",
			"ANSIBLE_HOME="+home, "ANSIBLE_LOCAL_TEMP="+tmp, "ANSIBLE_RETRY_FILES_ENABLED=0")
		out, err := cmd.CombinedOutput()
		recap, _ := parseRecap(string(out))
		return string(out), recap, err
	}
	// mustRun runs one part; wantChanged says whether it must change
	// something (first run) or nothing at all (second run).
	mustRun := func(label, tag string, wantChanged bool) {
		t.Helper()
		out, recap, err := run(tag)
		t.Logf("%s:\n%s", label, out)
		if err != nil {
			t.Fatalf("%s: ansible-playbook: %v", label, err)
		}
		if _, ok := parseRecap(out); !ok {
			t.Fatalf("%s: no PLAY RECAP in the output", label)
		}
		if recap.failed != 0 || recap.unreachable != 0 {
			t.Fatalf("%s: recap %+v", label, recap)
		}
		if wantChanged && recap.changed == 0 {
			t.Fatalf("%s: changed nothing (recap %+v)", label, recap)
		}
		if !wantChanged && recap.changed != 0 {
			t.Fatalf("%s: changed=%d, want 0; changed tasks: %q", label, recap.changed, changedTasks(out))
		}
	}

	cleaned := false
	t.Cleanup(func() {
		if !cleaned {
			out, _, err := run("cleanup")
			if err != nil {
				t.Logf("cleanup after failure: %v\n%s", err, out)
			}
		}
	})

	mustRun("build, first run", "build", true)
	var st map[string]any
	a.OK("GET", "/nodes/"+node+"/qemu/"+newid+"/status/current", nil, &st)
	if st["status"] != "running" {
		t.Fatalf("clone %s after build: %v", newid, st)
	}
	mustRun("build, second run", "build", false)

	mustRun("cleanup, first run", "cleanup", true)
	cleaned = true
	for _, v := range []string{vmid, newid} {
		if ans := a.Do("GET", "/nodes/"+node+"/qemu/"+v+"/status/current", nil); ans.Code != 500 || !strings.Contains(ans.Status, "does not exist") {
			t.Fatalf("VM %s after cleanup: %s %s", v, ans.Status, ans.Raw)
		}
	}
	mustRun("cleanup, second run", "cleanup", false)
}
