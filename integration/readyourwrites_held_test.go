package integration

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"kubevirt.io/client-go/kubevirt"

	"github.com/caddy-proxmox/caddy-proxmox/kube"
	"github.com/caddy-proxmox/caddy-proxmox/testenv"
	"github.com/caddy-proxmox/caddy-proxmox/translate"
)

// heldWatch passes requests to the apiserver and holds back the events
// of VirtualMachine watches while told to, so that a test decides when
// the plugin's informer hears of a write. Events pass in order.
type heldWatch struct {
	upstream *url.URL
	rt       http.RoundTripper
	mu       sync.Mutex
	cond     *sync.Cond
	holding  bool
	through  string // while holding: let events pass up to one containing this
}

func (p *heldWatch) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = true
}

// releaseThrough lets held events pass up to and including the first one
// containing s; holding goes on after it.
func (p *heldWatch) releaseThrough(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.through = s
	p.cond.Broadcast()
}

func (p *heldWatch) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = false
	p.cond.Broadcast()
}

// await blocks an event line until it may pass.
func (p *heldWatch) await(ctx context.Context, line []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.holding && p.through == "" && ctx.Err() == nil {
		p.cond.Wait()
	}
	if p.holding && p.through != "" && strings.Contains(string(line), p.through) {
		p.through = ""
	}
}

func (p *heldWatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host, out.Host, out.RequestURI = p.upstream.Scheme, p.upstream.Host, "", ""
	// The apiserver compresses watch streams for clients that accept gzip;
	// without the client's header the transport asks for gzip itself and
	// hands over the plain stream, one event a line.
	out.Header.Del("Accept-Encoding")
	res, err := p.rt.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	q := r.URL.Query()
	if !strings.HasSuffix(r.URL.Path, "/virtualmachines") || (q.Get("watch") != "true" && q.Get("watch") != "1") {
		// As it comes (core types may stream protobuf, not lines).
		buf := make([]byte, 32<<10)
		for {
			n, err := res.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				flush()
			}
			if err != nil {
				return
			}
		}
	}
	// KubeVirt's watch streams are JSON, one event a line.
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if !strings.Contains(string(line), `"type":"BOOKMARK"`) {
				p.await(r.Context(), line)
			}

			if _, werr := w.Write(line); werr != nil {
				return
			}
			flush()
		}
		if err != nil {
			return
		}
	}
}

// TestReadYourWritesOverHeldEvent: the plugin's informer hears of another
// writer's change only after the plugin wrote the VM itself (the watch
// event is held back, as a busy apiserver or network may deliver it):
// reads after that older event still show the plugin's own write, until
// the informer catches up.
func TestReadYourWritesOverHeldEvent(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, "rw-held")
	makeVM(t, ns, "rw-held", map[string]string{translate.LabelVMID: "4811"})
	makeVM(t, ns, "rw-sentinel", map[string]string{translate.LabelVMID: "4812"})

	upCfg := env.ConfigFor(testenv.AdminUser)
	rt, err := rest.TransportFor(upCfg)
	if err != nil {
		t.Fatal(err)
	}
	up, err := url.Parse(upCfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	p := &heldWatch{upstream: up, rt: rt}
	p.cond = sync.NewCond(&p.mu)
	srv := httptest.NewServer(p)
	t.Cleanup(func() { p.open(); srv.Close() })
	cfg := &rest.Config{Host: srv.URL}
	c := kube.New(kubernetes.NewForConfigOrDie(cfg), kubevirt.NewForConfigOrDie(cfg), cfg, kube.Options{
		Namespaces: []string{ns}, TaskNamespace: ns, SyncTimeout: time.Minute,
	})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	// Let the stand-in controller's first status writes pass first.
	guest := func(id int) kube.Guest {
		t.Helper()
		g, err := c.Guest(id)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	settled := func() bool {
		for _, id := range []int{4811, 4812} {
			if g, err := c.Guest(id); err != nil || g.VM().Status.PrintableStatus != "Stopped" {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(20 * time.Second); !settled(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			g, err := c.Guest(4812)
			t.Fatalf("the VMs did not settle: %v %+v", err, g.VM())
		}
	}
	g := guest(4811)

	p.hold()
	patch := func(name, label string) {
		t.Helper()
		body := `{"metadata":{"labels":{"` + label + `":"1"}}}`
		if _, err := env.KubeVirt.KubevirtV1().VirtualMachines(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch("rw-held", "another-writer") // the older event
	patch("rw-sentinel", "sentinel")   // marks that the older one was heard
	if err := c.SetGuestPool(ctx, g, ptr.To("ours")); err != nil {
		t.Fatal(err)
	}
	p.releaseThrough(`"name":"rw-sentinel"`)
	for deadline := time.Now().Add(10 * time.Second); guest(4812).VM().Labels["sentinel"] != "1"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the informer did not hear the released events")
		}
	}
	// The other writer's event has been applied; our own has not.
	if got := guest(4811).VM(); got.Annotations[translate.AnnotationPool] != "ours" {
		t.Fatalf("after the other writer's older event: pool %q (rv %s), want our write", got.Annotations[translate.AnnotationPool], got.ResourceVersion)
	}
	for _, row := range c.Guests() {
		if row.VMID == 4811 && row.VM().Annotations[translate.AnnotationPool] != "ours" {
			t.Fatalf("listed after the older event: pool %q", row.VM().Annotations[translate.AnnotationPool])
		}
	}
	p.open()
	for deadline := time.Now().Add(10 * time.Second); guest(4811).VM().Labels["another-writer"] != "1" || guest(4811).VM().Annotations[translate.AnnotationPool] != "ours"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the informer did not catch up")
		}
	}
}
