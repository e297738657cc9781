package wake

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/pvesim"
)

// waitPolls waits until n more polls have been answered: the positive
// sign that Caddy looked at the guests that many times.
func (e *env) waitPolls(n int) {
	e.t.Helper()
	target := e.polls() + n
	waitFor(e.t, time.Duration(n)*time.Second, fmt.Sprintf("%d polls", n), func() bool { return e.polls() >= target })
}

// busy_if keeps a guest busy with work that does not pass through Caddy
// (CPU, network, disk, seen in the cluster poll's rates) up well past
// idle_timeout; once the work ends it idles out.
func TestBusyIfKeepsWorkingGuestsUp(t *testing.T) {
	e := newEnvWith(t, pvesim.Options{StatInterval: 150 * time.Millisecond},
		pvesim.GuestSpec{VMID: 100, Name: "transcode"}, pvesim.GuestSpec{VMID: 101, Name: "torrent"}, pvesim.GuestSpec{VMID: 102, Name: "backup"})
	e.adminPort = testcaddy.FreePort(t)
	e.start(
		e.wakeSite("100", "busy_if cpu > 10% for 600ms\n\t\tidle_timeout 1s"),
		e.site("g101.test", "101", "busy_if net > 500kB/s for 600ms\n\t\tidle_timeout 1s", ""),
		e.site("g102.test", "102", "busy_if cpu > 50% disk > 1MB/s for 600ms\n\t\tidle_timeout 1s", ""),
	)
	// Each guest runs a job from its start on: a CPU-bound one, a
	// download (traffic between the guest and the Internet, not through
	// Caddy), a disk-bound one with little CPU.
	e.sim.SetLoad(100, pvesim.Load{CPU: 0.6})
	e.sim.SetLoad(101, pvesim.Load{CPU: 0.02, NetIn: 2e6})
	e.sim.SetLoad(102, pvesim.Load{CPU: 0.05, DiskWrite: 5e6})
	for _, host := range []string{"127.0.0.1", "g101.test", "g102.test"} {
		if a := e.get("/", "Host: "+host); a.code != 200 {
			t.Fatalf("wake %s: %d %s", host, a.code, a.body)
		}
	}
	// 40 polls = 4s, four times idle_timeout after the last request.
	e.waitPolls(40)
	for _, id := range []int{100, 101, 102} {
		if e.sim.Status(id) != "running" || e.sim.ActionCalls(id, "shutdown") != 0 {
			t.Fatalf("guest %d stopped while busy", id)
		}
	}
	var info struct {
		Busy  string `json:"busy"`
		Usage struct {
			CPU   float64 `json:"cpu_percent"`
			NetIn float64 `json:"netin_bytes_per_sec"`
		} `json:"usage"`
	}
	if code := e.adminJSON("GET", "/proxmox/guests/"+e.cluster+"/101", &info); code != 200 ||
		!strings.HasPrefix(info.Busy, "net ") || info.Usage.NetIn < 1.5e6 || info.Usage.NetIn > 2.5e6 {
		t.Fatalf("admin API: %d %+v", code, info)
	}
	// The jobs end one after the other; each guest idles out afterwards.
	for _, id := range []int{100, 101, 102} {
		e.sim.SetLoad(id, pvesim.Load{})
		ended := time.Now()
		waitFor(t, 5*time.Second, fmt.Sprintf("guest %d idles out after its work", id), func() bool { return e.sim.Status(id) == "stopped" })
		if took := time.Since(ended); took < time.Second {
			t.Fatalf("guest %d stopped %s after its work ended, before idle_timeout", id, took)
		}
	}
}

// pre_stop_check: a guest that answers "busy" is not stopped, and is
// asked again; once it answers 2xx it is stopped. {guest.address} is the
// guest's discovered address.
func TestPreStopCheck(t *testing.T) {
	ip := nextIP()
	e := newEnv(t, pvesim.GuestSpec{VMID: 100, IP: ip})
	var status atomic.Int32
	var asked atomic.Int32
	var lastURL atomic.Value
	status.Store(http.StatusServiceUnavailable)
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		lastURL.Store(r.URL.String())
		w.WriteHeader(int(status.Load()))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	checkPort := ln.Addr().(*net.TCPAddr).Port
	e.start(e.wakeSite("100", fmt.Sprintf("pre_stop_check http://{guest.address}:%d/idle?vmid={guest.vmid}&port={guest.port} 1s", checkPort)))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	// Asked at idle_timeout and again every idle_timeout while busy.
	waitFor(t, 5*time.Second, "three pre-stop checks", func() bool { return asked.Load() >= 3 })
	if e.sim.Status(100) != "running" || e.sim.ActionCalls(100, "shutdown") != 0 {
		t.Fatal("guest stopped although its pre_stop_check said busy")
	}
	if u := lastURL.Load(); u != fmt.Sprintf("/idle?vmid=100&port=%d", e.guestPort) {
		t.Fatalf("check URL %v", u)
	}
	// A redirect is no 2xx: still busy, and not followed.
	status.Store(http.StatusFound)
	n := asked.Load()
	waitFor(t, 5*time.Second, "two more checks", func() bool { return asked.Load() >= n+2 })
	if e.sim.Status(100) != "running" {
		t.Fatal("guest stopped on a redirect")
	}
	status.Store(http.StatusNoContent)
	waitFor(t, 5*time.Second, "stop once the check says idle", func() bool { return e.sim.Status(100) == "stopped" })
	if n := e.sim.ActionCalls(100, "shutdown"); n != 1 {
		t.Fatalf("shutdown calls %d", n)
	}
}

// stream_idle_timeout: a silent websocket or event stream (a forgotten
// tab) stops keeping the guest up; one that carries bytes still does.
func TestStreamIdleTimeout(t *testing.T) {
	e := newEnv(t, pvesim.GuestSpec{VMID: 100})
	e.start(e.wakeSite("100", "stream_idle_timeout 500ms"))
	if a := e.get("/"); a.code != 200 {
		t.Fatalf("wake: %d", a.code)
	}
	silent, _ := e.openUpgrade("/forgotten-tab")
	defer silent.Close()
	active, br := e.openUpgrade("/busy-tab")
	defer active.Close()
	// 16 round trips over 1.6s: three times stream_idle_timeout.
	var last time.Time
	for i := 0; i < 16; i++ {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		msg := fmt.Sprintf("ping %d\n", i)
		if _, err := active.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = active.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := br.ReadString('\n'); err != nil || line != msg {
			t.Fatalf("echo %q %v (guest %s)", line, err, e.sim.Status(100))
		}
		last = time.Now()
	}
	if e.sim.ActionCalls(100, "shutdown") != 0 {
		t.Fatal("guest stopped while a websocket carried traffic")
	}
	// Both websockets silent now: the guest stops with both open, no
	// earlier than stream_idle_timeout after the last byte.
	waitFor(t, 5*time.Second, "stop with two silent websockets open", func() bool { return e.sim.Status(100) == "stopped" })
	if took := time.Since(last); took < 500*time.Millisecond {
		t.Fatalf("stopped %s after the last byte", took)
	}

	// Event streams: one with ticks every 50ms keeps the guest up for
	// its 1.5s; a silent one (an answer that has not begun) does not.
	res, err := e.stream("/stream?n=30")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(res.Body)
	ticks := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: tick") {
			ticks++
		}
	}
	res.Body.Close()
	if ticks != 30 || e.sim.ActionCalls(100, "shutdown") != 1 {
		t.Fatalf("ticking event stream: %d ticks, %d shutdowns", ticks, e.sim.ActionCalls(100, "shutdown"))
	}
	quiet := make(chan error, 1)
	go func() {
		res, err := e.stream("/sleep?d=20s")
		if err == nil {
			res.Body.Close()
		}
		quiet <- err
	}()
	waitFor(t, 3*time.Second, "the silent stream in flight", func() bool { return e.sim.Status(100) == "running" && e.sim.Serving(100) })
	waitFor(t, 5*time.Second, "stop with a silent event stream open", func() bool { return e.sim.ActionCalls(100, "shutdown") == 2 })
	<-quiet

	// A stream whose client sends (a request body dribbling in) is not
	// silent either, though nothing comes back.
	pr, pw := io.Pipe()
	upload := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.base+"/sleep?d=20s", pr)
		req.Header.Set("Accept", "text/event-stream")
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
		}
		upload <- err
	}()
	waitFor(t, 3*time.Second, "the guest woken by the upload", func() bool { return e.sim.Serving(100) })
	for i := 0; i < 16; i++ {
		if _, err := pw.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := e.sim.ActionCalls(100, "shutdown"); n != 2 || e.sim.Status(100) != "running" {
		t.Fatalf("guest stopped during an upload (%d shutdowns)", n)
	}
	waitFor(t, 5*time.Second, "stop once the upload went quiet", func() bool { return e.sim.ActionCalls(100, "shutdown") == 3 })
	pw.Close()
	<-upload
}

// stream opens an event stream through Caddy.
func (e *env) stream(path string) (*http.Response, error) {
	req, _ := http.NewRequest("GET", e.base+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	return client.Do(req)
}
