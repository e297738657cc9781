package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestAnsibleProxmoxKVM(t *testing.T) {
	needTool(t, "ansible-playbook", "--version")
	needTool(t, debianPython, "-c", "import proxmoxer")
	a := pve(t)
	node := firstNode(a)
	user, tokenName, _ := strings.Cut(tokenID, "!")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ansible-playbook", "-i", "localhost,", "-c", "local", "clients/ansible_kvm.yml",
		"-e", "pve_host="+hostPort(), "-e", "pve_user="+user, "-e", "pve_token_name="+tokenName,
		"-e", "pve_token_secret="+tokenSecret, "-e", "pve_node="+node, "-e", "vmid="+nextID(a))
	cmd.Env = append(os.Environ(), "ANSIBLE_PYTHON_INTERPRETER="+debianPython, "ANSIBLE_NOCOLOR=1",
		"ANSIBLE_HOME="+t.TempDir(), "ANSIBLE_LOCAL_TEMP="+t.TempDir(), "ANSIBLE_RETRY_FILES_ENABLED=0")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("ansible-playbook: %v", err)
	}
	if !strings.Contains(string(out), "failed=0") {
		t.Fatal("playbook reported failures")
	}
}
