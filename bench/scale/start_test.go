package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/caddy-proxmox/caddy-proxmox/internal/testcaddy"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
)

// BenchmarkStart is the start alone, repeated: one cluster of SCALE_VMS
// VMs, the plugin started SCALE_STARTS times (default 3), printing each
// start's time to ready (as BenchmarkScale measures it), the CPU the
// plugin, kube-apiserver and etcd spent meanwhile, and the plugin's RSS.
// With SCALE_BASELINE set to other builds of ./caddy (comma-separated),
// the binaries start in turns, so that a change is compared within one
// run on a shared machine. Before each round, "lists" and "lists raw" are
// the floor: the big lists alone (listFloor), with gzip as client-go asks
// by default and without. SCALE_PROFILE names a folder for a CPU profile of each start
// and of kube-apiserver (Caddy's admin /debug/pprof and kube-apiserver's,
// SCALE_PROFILE_SECONDS long, default 6). SCALE_APISERVER_ARGS adds
// kube-apiserver flags (space-separated), to see what of a start is
// kube-apiserver's: "--feature-gates=DetectCacheInconsistency=false" stops
// its periodic check of the watch cache against etcd, on by default since
// Kubernetes 1.34, which on 2 shared cores competes with the start.
//
//	SCALE_BASELINE=/tmp/caddy-main SCALE_STARTS=4 go test ./bench/scale/ -run '^$' -bench '^BenchmarkStart$' -benchtime 1x
func BenchmarkStart(b *testing.B) {
	n := envInt("SCALE_VMS", 10000)
	starts := envInt("SCALE_STARTS", 3)
	bins := []string{testcaddy.Binary(b)}
	names := []string{"new"}
	for i, base := range strings.Split(os.Getenv("SCALE_BASELINE"), ",") {
		if base != "" {
			bins = append(bins, base)
			names = append(names, fmt.Sprintf("baseline%d", i+1))
		}
	}
	profDir := os.Getenv("SCALE_PROFILE")
	profSecs := envInt("SCALE_PROFILE_SECONDS", 6)
	for i := 0; i < b.N; i++ {
		opts := testenv.Options{Seed: true, ExtraAPIServerArgs: strings.Fields(os.Getenv("SCALE_APISERVER_ARGS"))}
		if profDir != "" {
			opts.ExtraAPIServerArgs = append(opts.ExtraAPIServerArgs, "--profiling=true")
		}
		env := testenv.StartT(b, opts)
		took := populate(b, env, n)
		px := newCountingProxy(b, env)
		kubeconfig := px.kubeconfig(b)
		fmt.Printf("\nstart runs: %d VMs (half running), cluster filled in %s; %d cores\n", n, took.Round(time.Second), nproc())
		fmt.Printf("%-10s %3s %9s %11s %11s %9s %8s %6s  %s\n", "binary", "run", "ready", "plugin CPU", "apiserv CPU", "etcd CPU", "RSS", "load", "lists (bytes as sent)")
		fmt.Printf("binaries: %s\n", strings.Join(bins, ", "))
		ready := map[string][]time.Duration{}
		for r := 0; r < starts; r++ {
			for _, gzip := range []bool{true, false} {
				apiserver := pidIn(env.Dir, "kube-apiserver")
				a0 := cpuOf(apiserver)
				took, size := listFloor(b, env, gzip)
				fmt.Printf("%-10s %3d %9s %11s %11s %9s %8s %6s  %.1f MB\n", map[bool]string{true: "lists", false: "lists raw"}[gzip], r,
					took.Round(10*time.Millisecond), "", (cpuOf(apiserver) - a0).Round(10*time.Millisecond), "", "", strings.Fields(loadavg())[0], float64(size)/1e6)
			}
			for bi, bin := range bins {
				name := names[bi]
				var during func(admin string)
				if profDir != "" {
					f := filepath.Join(profDir, fmt.Sprintf("start-%s-%d.pprof", name, r))
					fa := filepath.Join(profDir, fmt.Sprintf("apiserver-%s-%d.pprof", name, r))
					during = func(admin string) {
						go profileAPIServer(env, fa, profSecs)
						profile(admin, f, profSecs)
					}
				}
				apiserver, etcd := pidIn(env.Dir, "kube-apiserver"), pidIn(env.Dir, "etcd")
				a0, e0 := cpuOf(apiserver), cpuOf(etcd)
				before := px.snapshot()
				p := startPluginThen(b, bin, kubeconfig, n, during)
				after := px.snapshot()
				lists := fmt.Sprintf("%.1f MB; ", float64(after.listBytes()-before.listBytes())/1e6) + after.listsSince(before) + failedSince(after, before)
				fmt.Printf("%-10s %3d %9s %11s %11s %9s %8s %6s  %s\n", name, r, p.ready.Round(10*time.Millisecond),
					p.cpuAtReady.Round(10*time.Millisecond), (cpuOf(apiserver) - a0).Round(10*time.Millisecond),
					(cpuOf(etcd) - e0).Round(10*time.Millisecond), mib(p.rss()), strings.Fields(loadavg())[0], lists)
				ready[name] = append(ready[name], p.ready)
				if profDir != "" {
					time.Sleep(time.Duration(profSecs)*time.Second + time.Second) // let the profile finish
				}
				p.stop()
			}
		}
		for _, name := range names {
			ds := ready[name]
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			fmt.Printf("median ready, %s: %s\n", name, ds[len(ds)/2].Round(10*time.Millisecond))
		}
	}
}

// floorResources are the lists that make up nearly all of the plugin's
// start at scale: one object or more per VM each.
var floorResources = []struct{ group, resource string }{
	{"/apis/kubevirt.io/v1", "virtualmachines"},
	{"/apis/kubevirt.io/v1", "virtualmachineinstances"},
	{"/apis/cdi.kubevirt.io/v1beta1", "datavolumes"},
	{"/api/v1", "persistentvolumeclaims"},
}

// listFloor is what the plugin's start cannot beat: the same big lists,
// made at once by a client that only reads the answers (JSON, the
// PersistentVolumeClaims as protobuf like the plugin's), with or without
// gzip. It returns the time until the last answer is read, and the bytes
// received.
func listFloor(b *testing.B, env *testenv.Env, gzip bool) (time.Duration, int64) {
	cfg := restConfigFor(env)
	cfg.DisableCompression = !gzip
	cfg.QPS, cfg.Burst = 1000, 1000
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var size atomic.Int64
	var wg sync.WaitGroup
	for _, fr := range floorResources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := rc.Get().AbsPath(fr.group, fr.resource)
			if fr.resource == "persistentvolumeclaims" {
				req = req.SetHeader("Accept", "application/vnd.kubernetes.protobuf")
			}
			body, err := req.Stream(context.Background())
			if err != nil {
				b.Error(err)
				return
			}
			defer body.Close()
			n, err := io.Copy(io.Discard, body)
			if err != nil {
				b.Error(err)
			}
			size.Add(n)
		}()
	}
	wg.Wait()
	return time.Since(start), size.Load()
}

// profile saves a CPU profile of the process behind admin to file,
// starting as soon as the admin endpoint answers.
func profile(admin, file string, secs int) {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", admin, secs)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		res, err := http.Get(url)
		if err != nil {
			continue
		}
		defer res.Body.Close()
		buf, _ := io.ReadAll(res.Body)
		if res.StatusCode == http.StatusOK {
			_ = os.WriteFile(file, buf, 0o644)
		}
		return
	}
}

// profileAPIServer saves a CPU profile of kube-apiserver to file.
func profileAPIServer(env *testenv.Env, file string, secs int) {
	rc, err := rest.RESTClientFor(restConfigFor(env))
	if err != nil {
		return
	}
	buf, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(secs)).DoRaw(context.Background())
	if err == nil {
		_ = os.WriteFile(file, buf, 0o644)
	}
}

// restConfigFor is the admin config straight at kube-apiserver, for raw
// requests.
func restConfigFor(env *testenv.Env) *rest.Config {
	cfg := rest.CopyConfig(env.DirectConfig)
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	cfg.Timeout = time.Minute
	return cfg
}

// pidIn reads the pid testenv recorded for one of its processes.
func pidIn(dir, name string) int {
	buf, _ := os.ReadFile(filepath.Join(dir, name+".pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(buf)))
	return pid
}

// cpuOf is the CPU time (user and system) process pid has used so far.
func cpuOf(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	buf, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: the fields follow its ')'.
	s := string(buf)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on Linux everywhere that matters.
const clockTicks = 100

// failedSince names the lists and watches that failed since before.
func failedSince(now, before counts) string {
	var out []string
	for k, v := range now {
		if d := v - before[k]; d > 0 && strings.HasPrefix(k, "failed ") {
			out = append(out, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "failed "), d))
		}
	}
	if len(out) == 0 {
		return ""
	}
	sort.Strings(out)
	return " [failed: " + strings.Join(out, ", ") + "]"
}
