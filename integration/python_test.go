package integration

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// debianPython is the interpreter Debian's python3-proxmoxer and ansible
// are installed for; the python3 first on PATH may be another build.
const debianPython = "/usr/bin/python3"

// needTool fails (in CI) or skips (locally) when a real client is missing:
// CI must never pass by skipping the real-client tests.
func needTool(t *testing.T, check ...string) {
	t.Helper()
	if err := exec.Command(check[0], check[1:]...).Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: %v (CI installs it in .ci/run)", check, err)
		}
		t.Skipf("%v unavailable: %v (run .ci/run to install)", check, err)
	}
}

func hostPort() string { return strings.TrimPrefix(base, "https://") }

func runProxmoxer(t *testing.T, auth string) {
	needTool(t, debianPython, "-c", "import proxmoxer")
	a := pve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	user, tokenName, _ := strings.Cut(tokenID, "!")
	if auth == "password" {
		user = userID
	}
	cmd := exec.CommandContext(ctx, debianPython, "clients/proxmoxer_flow.py")
	cmd.Env = append(os.Environ(),
		"PVE_HOST="+hostPort(), "PVE_AUTH="+auth, "PVE_USER="+user,
		"PVE_TOKEN_NAME="+tokenName, "PVE_TOKEN_VALUE="+tokenSecret, "PVE_PASSWORD="+userPass,
		"PVE_VMID="+nextID(a),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("proxmoxer (%s): %v", auth, err)
	}
}

func TestProxmoxerToken(t *testing.T)    { runProxmoxer(t, "token") }
func TestProxmoxerPassword(t *testing.T) { runProxmoxer(t, "password") }

// TestPythonConsoleClient opens the serial console and the VNC display of
// a running VM from Python, with proxmoxer and Debian's python3-websockets,
// as the README's console example does.
func TestPythonConsoleClient(t *testing.T) {
	needTool(t, debianPython, "-c", "import proxmoxer, websockets")
	a := pve(t)
	node, id := runningVM(t, a, "py-console", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user, tokenName, _ := strings.Cut(tokenID, "!")
	cmd := exec.CommandContext(ctx, debianPython, "clients/proxmoxer_console.py")
	cmd.Env = append(os.Environ(), "PVE_HOST="+hostPort(), "PVE_NODE="+node, "PVE_VMID="+id,
		"PVE_USER="+user, "PVE_TOKEN_NAME="+tokenName, "PVE_TOKEN_VALUE="+tokenSecret)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("python console client: %v", err)
	}
}
