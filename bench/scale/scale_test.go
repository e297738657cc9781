// Package scale runs the plugin, built as ./caddy, against a real
// kube-apiserver and etcd (testenv) holding many VMs as the API creates
// them and KubeVirt and CDI fill them in (internal/fleet), half of them
// running, and prints what issue 14 asks of it: how soon it serves after
// start, its whole-process memory, what a watch expiry and a
// kube-apiserver restart cost (relists, failed and slow requests) and
// /cluster/resources and status/current next to Caddy's respond serving
// the same bytes in the same process. It takes minutes: bench/scale.sh
// runs it (SCALE_VMS, default 10000); go test ./... only compiles it.
package scale

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiclient "kubevirt.io/client-go/containerizeddataimporter"
	"kubevirt.io/client-go/kubevirt"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/caddy-proxmox/caddy-proxmox/internal/benchload"
	"github.com/caddy-proxmox/caddy-proxmox/internal/fleet"
	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

const (
	tokenID = "root@pam!scale"
	secret  = "7c0f5d2e-bbbb-4ccc-8ddd-0123456789ab"
	ns      = "default"
)

// BenchmarkScale is the whole run; run it with -benchtime 1x.
func BenchmarkScale(b *testing.B) {
	n := envInt("SCALE_VMS", 10000)
	side := envDuration("BENCH_SIDE", 4*time.Second)
	for i := 0; i < b.N; i++ {
		r := &report{vms: n}
		env := testenv.StartT(b, testenv.Options{Seed: true})
		r.populate = populate(b, env, n)
		px := newCountingProxy(b, env)
		p := startPlugin(b, testcaddy.Binary(b), px.kubeconfig(b), n)
		r.ready, r.cpuReady, r.rssReady = p.ready, p.cpuAtReady, p.rss()
		r.listsAtStart = px.snapshot()

		// respond routes carrying the API's own answers, loaded into the
		// same process (the cluster connection is kept across the reload).
		paths := map[string]string{
			"resources": "/api2/json/cluster/resources?type=vm",
			"status":    "/api2/json/nodes/" + p.node + "/qemu/" + strconv.Itoa(p.vmid) + "/status/current",
		}
		bodies := map[string][]byte{}
		for k, path := range paths {
			bodies[k] = p.get(b, path)
		}
		before := px.snapshot()
		p.load(b, bodies)
		r.reloadLists = px.snapshot().lists() - before.lists()

		r.steady, r.steadyErr = measure(p, paths, side)
		r.expiry = p.during(b, func() { px.expireWatches(b) }, px)
		r.restart = p.during(b, func() {
			if err := env.RestartAPIServer(context.Background()); err != nil {
				b.Fatal(err)
			}
		}, px)
		// The health probe may still mark the cluster down for a while
		// after its restart on a loaded machine; the ratio is of the
		// cluster serving.
		r.settled = p.settle(paths["resources"], 10*time.Second, 2*time.Minute)
		r.after, r.afterErr = measure(p, paths, side)
		r.rssEnd = p.rss()
		r.print(os.Stdout)
		if r.steadyErr != nil || r.afterErr != nil {
			b.Errorf("measuring: %v", errors.Join(r.steadyErr, r.afterErr))
		}
		b.ReportMetric(r.ready.Seconds(), "s-ready")
		b.ReportMetric(float64(r.rssEnd)/(1<<20), "MiB-rss")
		b.ReportMetric(r.steady["resources"], "resources-ratio")
		b.ReportMetric(r.steady["status"], "status-ratio")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// populate creates n fleet VMs with their disks' DataVolumes and claims and
// the instances of the running half, statuses included, straight at
// kube-apiserver, and returns how long it took.
func populate(b *testing.B, env *testenv.Env, n int) time.Duration {
	start := time.Now()
	cfg := rest.CopyConfig(env.DirectConfig)
	cfg.QPS, cfg.Burst = 10000, 20000
	cfg.WarningHandler = rest.NoWarnings{}
	kc := kubernetes.NewForConfigOrDie(cfg)
	kv := kubevirt.NewForConfigOrDie(cfg)
	cdi := cdiclient.NewForConfigOrDie(cfg)
	var nodes []string
	for _, sn := range testenv.SeedNodes {
		nodes = append(nodes, sn.Name)
	}
	objs, err := fleet.Objects(fleet.Spec{Namespace: ns, N: n, FirstVMID: 1000, Nodes: nodes, StorageClass: testenv.DefaultStorageClass})
	if err != nil {
		b.Fatal(err)
	}
	// Instances last: they name their VM's UID.
	var vms, vmis []runtime.Object
	for _, o := range objs {
		if _, ok := o.(*kubevirtv1.VirtualMachineInstance); ok {
			vmis = append(vmis, o)
		} else {
			vms = append(vms, o)
		}
	}
	for _, batch := range [][]runtime.Object{vms, vmis} {
		work := make(chan runtime.Object)
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for w := 0; w < 24; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for o := range work {
					if err := create(context.Background(), kc, kv, cdi, o); err != nil {
						failed.CompareAndSwap(nil, &err)
					}
				}
			}()
		}
		for _, o := range batch {
			work <- o
		}
		close(work)
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatal(*err)
		}
	}
	return time.Since(start)
}

// create writes o and then its status, as the controllers would.
func create(ctx context.Context, kc kubernetes.Interface, kv kubevirt.Interface, cdi cdiclient.Interface, o runtime.Object) error {
	c := metav1.CreateOptions{}
	u := metav1.UpdateOptions{}
	switch o := o.(type) {
	case *kubevirtv1.VirtualMachine:
		o.ResourceVersion = ""
		out, err := kv.KubevirtV1().VirtualMachines(o.Namespace).Create(ctx, o, c)
		if err != nil {
			return fmt.Errorf("VM %s: %w", o.Name, err)
		}
		out.Status = o.Status
		_, err = kv.KubevirtV1().VirtualMachines(o.Namespace).UpdateStatus(ctx, out, u)
		return err
	case *kubevirtv1.VirtualMachineInstance:
		o.ResourceVersion = ""
		o.OwnerReferences[0].UID = ""
		vm, err := kv.KubevirtV1().VirtualMachines(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		o.OwnerReferences[0].UID = vm.UID
		// Like KubeVirt's, the instance's CRD has no status subresource:
		// the status is written with the object.
		if _, err := kv.KubevirtV1().VirtualMachineInstances(o.Namespace).Create(ctx, o, c); err != nil {
			return fmt.Errorf("VMI %s: %w", o.Name, err)
		}
		return nil
	case *cdiv1.DataVolume:
		o.ResourceVersion = ""
		o.OwnerReferences = nil // the VM's UID is the server's; ownership does not matter here
		out, err := cdi.CdiV1beta1().DataVolumes(o.Namespace).Create(ctx, o, c)
		if err != nil {
			return fmt.Errorf("DataVolume %s: %w", o.Name, err)
		}
		out.Status = o.Status
		_, err = cdi.CdiV1beta1().DataVolumes(o.Namespace).UpdateStatus(ctx, out, u)
		return err
	case *corev1.PersistentVolumeClaim:
		o.ResourceVersion = ""
		o.OwnerReferences = nil
		out, err := kc.CoreV1().PersistentVolumeClaims(o.Namespace).Create(ctx, o, c)
		if err != nil {
			return fmt.Errorf("claim %s: %w", o.Name, err)
		}
		out.Status = o.Status
		_, err = kc.CoreV1().PersistentVolumeClaims(o.Namespace).UpdateStatus(ctx, out, u)
		return err
	}
	return fmt.Errorf("unexpected %T", o)
}

// countingProxy stands between the plugin and the cluster (plain HTTP in,
// testenv's front proxy out) and counts the plugin's lists and watches by
// resource. expireWatches ends every watch and answers each resource's
// next watch 410 Gone, as kube-apiserver does once the resourceVersion a
// watch resumes from has been compacted away.
type countingProxy struct {
	url string
	ca  []byte // PEM of its serving certificate
	rp  *httputil.ReverseProxy
	env *testenv.Env

	mu      sync.Mutex
	counts  map[string]int // "list virtualmachines", "watch ..."
	expired map[string]bool
	watches map[*http.Request]context.CancelFunc
}

func newCountingProxy(b *testing.B, env *testenv.Env) *countingProxy {
	target, _ := url.Parse(env.ProxyURL)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(env.CAData)
	rp := httputil.NewSingleHostReverseProxy(target)
	// DisableCompression: the plugin's Accept-Encoding passes through as
	// it is (see testenv's proxy).
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64, DisableCompression: true}
	rp.FlushInterval = -1
	p := &countingProxy{rp: rp, env: env, counts: map[string]int{}, watches: map[*http.Request]context.CancelFunc{}}
	// TLS: client-go sends no bearer token over plain HTTP.
	srv := httptest.NewUnstartedServer(p)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	b.Cleanup(srv.Close)
	p.url = srv.URL
	p.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return p
}

// kind tells what a request is: list (or a watch that sends the list
// first), watch, or "" for anything else, and of which resource.
func kind(r *http.Request) (what, resource string) {
	if r.Method != http.MethodGet {
		return "", ""
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api": // /api/v1/...
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis": // /apis/<group>/<version>/...
		rest = parts[3:]
	default:
		return "", ""
	}
	if len(rest) == 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) != 1 {
		return "", "" // one object, a subresource, or discovery
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true" {
		return "list", rest[0]
	}
	return "watch", rest[0]
}

func (p *countingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	what, res := kind(r)
	if what == "" {
		p.rp.ServeHTTP(w, r)
		return
	}
	streaming := r.URL.Query().Get("watch") == "true"
	p.mu.Lock()
	gone := what == "watch" && p.expired[res]
	if gone {
		delete(p.expired, res)
	}
	var cancel context.CancelFunc
	if streaming {
		var ctx context.Context
		ctx, cancel = context.WithCancel(r.Context())
		r = r.WithContext(ctx)
		p.watches[r] = cancel
	}
	p.mu.Unlock()
	if gone {
		p.count(what+" "+res, http.StatusGone)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusGone)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}`)
		return
	}
	// Counted when the answer starts: a watch list streams for as long as
	// the watch lasts.
	sw := &statusWriter{ResponseWriter: w, head: func(code int) { p.count(what+" "+res, code) }}
	p.rp.ServeHTTP(sw, r)
	sw.WriteHeader(http.StatusBadGateway) // no answer at all
	if what == "list" {
		p.mu.Lock()
		p.counts["bytes "+res] += int(sw.bytes) // as sent, compressed or not
		p.mu.Unlock()
	}
	if cancel != nil {
		p.mu.Lock()
		delete(p.watches, r)
		p.mu.Unlock()
		cancel()
	}
}

// count records a request: the successful ones by what and resource, the
// others as attempts.
func (p *countingProxy) count(key string, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if code != http.StatusOK {
		key = "failed " + key
	}
	p.counts[key]++
}

// statusWriter tells head the status of the answer, once.
type statusWriter struct {
	http.ResponseWriter
	head  func(code int)
	done  bool
	bytes int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.done {
		return
	}
	w.done = true
	w.head(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// expireWatches ends every watch in flight, and makes the next watch of
// each of their resources answer 410.
func (p *countingProxy) expireWatches(b *testing.B) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.expired == nil {
		p.expired = map[string]bool{}
	}
	for r, cancel := range p.watches {
		_, res := kind(r)
		p.expired[res] = true
		cancel()
	}
}

// counts is a copy of the counters.
type counts map[string]int

func (p *countingProxy) snapshot() counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := counts{}
	for k, v := range p.counts {
		out[k] = v
	}
	return out
}

// listBytes is how many bytes the lists' answers took, as sent.
func (c counts) listBytes() int { return c.sum("bytes ") }

// lists is the number of successful lists of any resource.
func (c counts) lists() int { return c.sum("list ") }

// sum adds the counts whose keys start with prefix.
func (c counts) sum(prefix string) int {
	n := 0
	for k, v := range c {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// listsSince says which resources were listed how often since before,
// and how many lists and watches failed.
func (c counts) listsSince(before counts) string {
	var out []string
	failed := 0
	for k, v := range c {
		d := v - before[k]
		switch {
		case d > 0 && strings.HasPrefix(k, "list "):
			out = append(out, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "list "), d))
		case d > 0 && strings.HasPrefix(k, "failed "):
			failed += d
		}
	}
	sort.Strings(out)
	if failed > 0 {
		out = append(out, fmt.Sprintf("(and %d failed lists or watches)", failed))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func (p *countingProxy) kubeconfig(b *testing.B) string {
	f := filepath.Join(b.TempDir(), "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["scale"] = &clientcmdapi.Cluster{Server: p.url, CertificateAuthorityData: p.ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: p.env.Config.BearerToken}
	cfg.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "admin", Namespace: ns}
	cfg.CurrentContext = "scale"
	if err := clientcmd.WriteToFile(*cfg, f); err != nil {
		b.Fatal(err)
	}
	return f
}

// plugin is ./caddy serving proxmox_api on the cluster.
type plugin struct {
	cmd             *exec.Cmd
	base, admin     string
	kubeconfig, dir string
	port, adminPort int
	respondPorts    map[string]int // respond's servers, by answer (measure's paths)
	ready           time.Duration
	cpuAtReady      time.Duration // the process's CPU time (user and system) then
	client          *http.Client
	node            string
	vmid            int
	out             *bytes.Buffer
	exited          chan struct{}
}

// stop ends the process (SIGTERM, then SIGKILL after 10 s).
func (p *plugin) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// config serves the API and, for each answer in static, respond sending
// it from a Caddy server of its own (respondPorts): each has one route
// and no matcher, so that no side pays for matching the other's routes.
func (p *plugin) config(static map[string][]byte) []byte {
	listener := func(port int, handler map[string]any) map[string]any {
		return map[string]any{
			"listen": []string{"127.0.0.1:" + strconv.Itoa(port)}, "protocols": []string{"h1"},
			"automatic_https": map[string]any{"disable": true}, "routes": []any{map[string]any{"handle": []any{handler}}},
		}
	}
	servers := map[string]any{"scale": listener(p.port, map[string]any{
		"handler": "proxmox_api", "kubeconfig": p.kubeconfig, "sync_timeout": "10m",
		"tokens": []any{map[string]string{"id": tokenID, "secret": secret}}, "auth_failure_delay": 0,
	})}
	for k, body := range static {
		servers["respond-"+k] = listener(p.respondPort(k), map[string]any{
			"handler": "static_response", "body": string(body), "headers": map[string][]string{"Content-Type": {"application/json;charset=UTF-8"}},
		})
	}
	cfg := map[string]any{
		"admin":   map[string]any{"listen": "127.0.0.1:" + strconv.Itoa(p.adminPort)},
		"storage": map[string]any{"module": "file_system", "root": p.dir},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "WARN"}}},
		"apps":    map[string]any{"http": map[string]any{"servers": servers}},
	}
	buf, _ := json.Marshal(cfg)
	return buf
}

// respondPort is the port of respond's server for answer k (see
// respondPorts).
func (p *plugin) respondPort(k string) int { return p.respondPorts[k] }

// startPlugin runs bin (./caddy) and returns once it answers
// /cluster/resources with every VM, timing that from the process's start.
func startPlugin(b *testing.B, bin, kubeconfig string, n int) *plugin {
	return startPluginThen(b, bin, kubeconfig, n, nil)
}

// startPluginThen is startPlugin calling during (if set) in a goroutine
// once the process runs, with its admin address.
func startPluginThen(b *testing.B, bin, kubeconfig string, n int, during func(admin string)) *plugin {
	p := &plugin{kubeconfig: kubeconfig, dir: b.TempDir(), port: testcaddy.FreePort(b), adminPort: testcaddy.FreePort(b),
		respondPorts: map[string]int{"resources": testcaddy.FreePort(b), "status": testcaddy.FreePort(b)},
		client:       benchload.Client(8), out: &bytes.Buffer{}, exited: make(chan struct{})}
	p.base, p.admin = "http://127.0.0.1:"+strconv.Itoa(p.port), "http://127.0.0.1:"+strconv.Itoa(p.adminPort)
	file := filepath.Join(p.dir, "caddy.json")
	if err := os.WriteFile(file, p.config(nil), 0o600); err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(bin, "run", "--config", file)
	p.cmd.Env = append(os.Environ(), "HOME="+p.dir, "XDG_DATA_HOME="+p.dir, "XDG_CONFIG_HOME="+p.dir)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := p.exited
	go func() { _ = p.cmd.Wait(); close(exited) }()
	b.Cleanup(p.stop)
	if during != nil {
		go during(p.admin)
	}
	deadline := start.Add(10 * time.Minute)
	for {
		if body, code := p.try("/api2/json/cluster/resources?type=vm"); code == 200 && bytes.Count(body, []byte(`"type":"qemu"`)) >= n {
			p.ready = time.Since(start)
			p.cpuAtReady = cpuOf(p.cmd.Process.Pid)
			p.pick(b, body)
			return p
		}
		select {
		case <-exited:
			b.Fatalf("./caddy exited:\n%s", p.out)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("the plugin did not list %d VMs in 10 minutes:\n%s", n, p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pick chooses a running VM for status/current.
func (p *plugin) pick(b *testing.B, body []byte) {
	var env struct {
		Data []struct {
			VMID   int
			Node   string
			Status string
		}
	}
	if err := json.Unmarshal(body, &env); err != nil {
		b.Fatal(err)
	}
	for _, r := range env.Data {
		if r.Status == "running" {
			p.node, p.vmid = r.Node, r.VMID
			return
		}
	}
	b.Fatal("no VM runs")
}

func (p *plugin) auth() http.Header {
	return http.Header{"Authorization": {"PVEAPIToken=" + tokenID + "=" + secret}}
}

func (p *plugin) try(path string) ([]byte, int) {
	req, _ := http.NewRequest(http.MethodGet, p.base+path, nil)
	req.Header = p.auth()
	res, err := p.client.Do(req)
	if err != nil {
		return nil, 0
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return body, res.StatusCode
}

func (p *plugin) get(b *testing.B, path string) []byte {
	body, code := p.try(path)
	if code != 200 {
		b.Fatalf("GET %s: %d %s", path, code, body)
	}
	return body
}

// load replaces the configuration through the admin API.
func (p *plugin) load(b *testing.B, static map[string][]byte) {
	res, err := http.Post(p.admin+"/load", "application/json", bytes.NewReader(p.config(static)))
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		b.Fatalf("loading the configuration: %s %s", res.Status, body)
	}
}

// rss is the process's resident memory in bytes.
func (p *plugin) rss() int64 {
	buf, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(buf), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// measure loads each API path and its respond route alternately and
// returns the ratios (median of paired rounds), as far as it got.
func measure(p *plugin, paths map[string]string, side time.Duration) (map[string]float64, error) {
	out := map[string]float64{}
	round := 250 * time.Millisecond
	for k, path := range paths {
		res, err := benchload.Alternate(p.client, 4, max(2, int(side/round)), round,
			benchload.Target{URL: p.base + path, Header: p.auth()},
			benchload.Target{URL: "http://127.0.0.1:" + strconv.Itoa(p.respondPort(k)) + path, Header: p.auth()})
		if err != nil {
			return out, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = benchload.Ratio(res[0], res[1])
		out[k+" api"], out[k+" respond"] = res[0].PerSec, res[1].PerSec
	}
	return out, nil
}

// settle waits until path has answered 200 without a break for steady
// (at most limit) and returns how long that took.
func (p *plugin) settle(path string, steady, limit time.Duration) time.Duration {
	start := time.Now()
	okSince := time.Time{}
	for time.Since(start) < limit {
		if _, code := p.try(path); code != 200 {
			okSince = time.Time{}
		} else if okSince.IsZero() {
			okSince = time.Now()
		} else if time.Since(okSince) >= steady {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// episode is what clients saw while something happened to the cluster.
type episode struct {
	took      time.Duration // of the event itself (a restart)
	lists     string        // relists it caused, by resource
	ok, down  int           // 200s; 503s (cluster unavailable)
	failed    int           // anything else
	firstFail string
	slowest   time.Duration // of the 200s
	recovered time.Duration // from the event's end to the first 200 after it
	requests  int
}

// during runs event under load (status/current and /cluster/resources from
// four clients) and watches the plugin until it has relisted and answered
// for five seconds more.
func (p *plugin) during(b *testing.B, event func(), px *countingProxy) episode {
	before := px.snapshot()
	var (
		mu      sync.Mutex
		e       episode
		stop    atomic.Bool
		wg      sync.WaitGroup
		ended   atomic.Pointer[time.Time]
		firstOK atomic.Pointer[time.Time]
	)
	paths := []string{"/api2/json/cluster/resources?type=vm", fmt.Sprintf("/api2/json/nodes/%s/qemu/%d/status/current", p.node, p.vmid)}
	for c := 0; c < 4; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; !stop.Load(); i++ {
				start := time.Now()
				body, code := p.try(paths[i%2])
				d := time.Since(start)
				mu.Lock()
				e.requests++
				switch code {
				case 200:
					e.ok++
					if end := ended.Load(); end != nil && start.After(*end) {
						now := time.Now()
						firstOK.CompareAndSwap(nil, &now)
					}
					e.slowest = max(e.slowest, d)
				case 503:
					e.down++
				default:
					e.failed++
					if e.firstFail == "" {
						e.firstFail = fmt.Sprintf("%d %.200s", code, body)
					}
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	t0 := time.Now()
	event()
	end := time.Now()
	e.took = end.Sub(t0)
	ended.Store(&end)
	// Until the plugin answers again and the lists it makes are over.
	deadline := time.Now().Add(5 * time.Minute)
	for firstOK.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	quiet := px.snapshot()
	for time.Now().Before(deadline) {
		time.Sleep(5 * time.Second)
		now := px.snapshot()
		if now.lists() == quiet.lists() {
			break
		}
		quiet = now
	}
	stop.Store(true)
	wg.Wait()
	if f := firstOK.Load(); f != nil {
		e.recovered = f.Sub(end)
	}
	e.lists = px.snapshot().listsSince(before)
	return e
}

// report is the run's outcome.
type report struct {
	vms              int
	populate, ready  time.Duration
	cpuReady         time.Duration
	rssReady, rssEnd int64
	listsAtStart     counts
	reloadLists      int
	steady, after    map[string]float64
	steadyErr        error
	afterErr         error
	settled          time.Duration
	expiry, restart  episode
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nscale run: %d VMs (half running) on a real kube-apiserver + etcd; %d cores, load %s\n", r.vms, nproc(), loadavg())
	fmt.Fprintf(w, "  cluster filled in %s (VMs, instances, DataVolumes, claims, with statuses)\n", r.populate.Round(time.Second))
	row := func(name, val, goal string, ok bool) {
		mark := "yes"
		if !ok {
			mark = "NO"
		}
		if goal == "" {
			mark = ""
		}
		fmt.Fprintf(w, "%-58s %16s %10s %4s\n", name, val, goal, mark)
	}
	fmt.Fprintf(w, "%-58s %16s %10s %4s\n", "measure", "value", "goal", "ok")
	row("ready to serve after start (all VMs listed)", r.ready.Round(10*time.Millisecond).String(), "<= 5s", r.ready <= 5*time.Second)
	row("  plugin CPU time by then", r.cpuReady.Round(10*time.Millisecond).String(), "", true)
	row("  lists made at start", r.listsAtStart.listsSince(nil), "", true)
	row("whole-process RSS when ready", mib(r.rssReady), "", true)
	row("whole-process RSS at the end", mib(r.rssEnd), "", true)
	row("lists caused by a config reload", strconv.Itoa(r.reloadLists), "0", r.reloadLists == 0)
	row("answering 200 steadily (10 s) again after the restart", r.settled.Round(100*time.Millisecond).String(), "", true)
	for _, m := range []struct {
		name string
		v    map[string]float64
		err  error
	}{{"steady", r.steady, r.steadyErr}, {"after expiry and restart", r.after, r.afterErr}} {
		if m.err != nil {
			fmt.Fprintf(w, "  measuring %s failed: %v\n", m.name, m.err)
		}
		row(fmt.Sprintf("/cluster/resources api/respond, %s (%.0f vs %.0f req/s)", m.name, m.v["resources api"], m.v["resources respond"]), fmt.Sprintf("%.2f", m.v["resources"]), ">= 0.8", m.v["resources"] >= 0.8)
		row(fmt.Sprintf("status/current api/respond, %s (%.0f vs %.0f req/s)", m.name, m.v["status api"], m.v["status respond"]), fmt.Sprintf("%.2f", m.v["status"]), ">= 0.9", m.v["status"] >= 0.9)
	}
	for _, e := range []struct {
		name string
		e    episode
	}{{"watch expiry (410 on resume)", r.expiry}, {"kube-apiserver restart", r.restart}} {
		row(e.name+": lists", e.e.lists, "one each", true)
		row(fmt.Sprintf("  requests: %d ok, failed otherwise", e.e.ok), strconv.Itoa(e.e.failed), "0", e.e.failed == 0)
		// Reads are answered from the caches for stale_reads (30 s by
		// default) once the cluster is lost: longer than a restart.
		row("  requests answered 503 (cluster unavailable)", strconv.Itoa(e.e.down), "0", e.e.down == 0)
		row("  slowest 200 meanwhile", e.e.slowest.Round(time.Millisecond).String(), "", true)
		row(fmt.Sprintf("  first 200 after the event (which took %s)", e.e.took.Round(10*time.Millisecond)), e.e.recovered.Round(time.Millisecond).String(), "", true)
		if e.e.firstFail != "" {
			fmt.Fprintf(w, "    first failure: %s\n", e.e.firstFail)
		}
	}
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func nproc() int {
	buf, _ := os.ReadFile("/proc/cpuinfo")
	return max(1, bytes.Count(buf, []byte("processor\t:")))
}

func loadavg() string {
	buf, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(buf))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
