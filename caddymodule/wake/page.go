package wake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/caddy-proxmox/caddy-proxmox/lxc"
)

// wakePage is the loading page. With JavaScript it follows the wake over
// SSE and reloads on "ready"; without, a meta refresh reloads it.
var wakePage = template.Must(template.New("wake").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{if .Error}}Could not start {{.Name}}{{else}}Starting {{.Name}}…{{end}}</title>
<noscript><meta http-equiv="refresh" content="{{.Refresh}}"></noscript>
<style>
body{font-family:system-ui,sans-serif;background:#f5f6f8;color:#222;display:flex;align-items:center;justify-content:center;min-height:100vh;margin:0}
main{background:#fff;border-radius:12px;box-shadow:0 2px 12px #0002;padding:2rem 2.5rem;max-width:34rem;width:90%}
h1{font-size:1.3rem;margin:0 0 1rem}
.bar{height:8px;background:#e3e6ea;border-radius:4px;overflow:hidden}
.bar div{height:100%;width:{{.Progress}}%;background:#e57000;transition:width .3s}
#msg{margin:1rem 0 .5rem;font-weight:500}
#retry{margin:0 0 .5rem;color:#555}#retry:empty{display:none}
#log{font:12px/1.5 ui-monospace,monospace;color:#666;list-style:none;padding:0;margin:0;max-height:12rem;overflow:auto}
.err #msg{color:#b00020}.err .bar div{background:#b00020}
</style>
</head>
<body>
<main id="main"{{if .Error}} class="err"{{end}}>
<h1 id="title">{{if .Error}}{{.Name}} could not be started{{else}}Starting {{.Name}}…{{end}}</h1>
<div class="bar"><div id="bar"></div></div>
<p id="msg">{{.Message}}</p>
<p id="retry"></p>
<ul id="log"></ul>
<noscript><p>This page reloads by itself every {{.Refresh}} seconds.</p></noscript>
</main>
<script>
(function(){
  var bar=document.getElementById("bar"),msg=document.getElementById("msg"),log=document.getElementById("log"),main=document.getElementById("main"),title=document.getElementById("title"),next=document.getElementById("retry");
  var retry={{.Refresh}}, done=false, last=null;
  function reload(ms){ if(done){return} done=true; setTimeout(function(){location.reload()},ms) }
  // After a failure: count down to the next try, then reload.
  function countdown(secs){
    var end=Date.now()+secs*1000;
    (function tick(){
      var left=Math.ceil((end-Date.now())/1000);
      if(left<=0){ next.textContent="Trying again…"; reload(0); return }
      next.textContent="Trying again in "+left+" s";
      setTimeout(tick,250);
    })();
  }
  // A step that updates the one before of its phase (the count of
  // readiness checks) rewrites that line instead of adding one.
  function logStep(e){
    var text=new Date(e.time).toLocaleTimeString()+"  "+e.phase+": "+e.message;
    if(e.update && last && last.getAttribute("data-phase")===e.phase){ last.textContent=text; return }
    last=document.createElement("li"); last.setAttribute("data-phase",e.phase); last.textContent=text; log.appendChild(last);
    log.scrollTop=log.scrollHeight;
  }
  {{if .Error}}countdown(retry);{{else}}
  if(!window.EventSource){ reload(2000); return }
  var es=new EventSource({{.EventsPath}});
  es.addEventListener("progress",function(m){
    var e=JSON.parse(m.data);
    bar.style.width=e.progress+"%"; msg.textContent=e.message; logStep(e);
    if(e.phase==="ready"){ es.close(); reload(150) }
    if(e.phase==="error"){ es.close(); main.className="err"; title.textContent={{.Name}}+" could not be started"; document.title="Could not start "+{{.Name}}; countdown(Math.max(1,Math.ceil(e.retry_after||5))) }
  });
  es.onerror=function(){ es.close(); reload(3000) };
  {{end}}
})();
</script>
</body>
</html>
`))

// wakePageData is what the page (built-in or page template) is given.
type wakePageData struct {
	// Name is the guest's public name; State its state (starting,
	// failed…); Message what is happening, or what failed.
	Name, State, Message, EventsPath string
	Error                            bool
	// Refresh and RetryAfter are the seconds until a retry.
	Refresh, RetryAfter, Progress int
}

// servePage answers the loading page: 503 (so that nothing caches or
// indexes it as the site) with Retry-After and Cache-Control: no-store.
func (h *WakeHandler) servePage(w http.ResponseWriter, r *http.Request, op *lxc.WakeOp) error {
	data := wakePageData{Name: h.publicName(), Message: "Waking up…", EventsPath: h.EventsPath, Refresh: 2, Progress: 5}
	select {
	case <-op.Done():
		if err := op.Err(); err != nil {
			data.Error, data.Message, data.Progress = true, h.failureText(err), 100
			if we, ok := err.(*lxc.WakeError); ok && we.RetryAfter > 0 {
				data.Refresh = int(math.Ceil(we.RetryAfter.Seconds()))
			} else {
				data.Refresh = 10
			}
		}
	default:
	}
	data.State, data.RetryAfter = string(h.guest.State()), data.Refresh
	if data.Error && h.UseHandleErrors {
		return h.unavailable(w, r, http.StatusServiceUnavailable, time.Duration(data.Refresh)*time.Second, data.Message)
	}
	errText := ""
	if data.Error {
		errText = data.Message
	}
	h.setPlaceholders(r, errText, data.Refresh)
	var buf bytes.Buffer
	if err := h.renderPage(&buf, data); err != nil {
		return err
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Retry-After", strconv.Itoa(data.Refresh))
	hd.Set(wakeHeader, "loading")
	hd.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusServiceUnavailable)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
	return nil
}

// eventJSON is an Event on the wire.
type eventJSON struct {
	Time       time.Time `json:"time"`
	Phase      string    `json:"phase"`
	Message    string    `json:"message"`
	Progress   int       `json:"progress"`
	RetryAfter float64   `json:"retry_after,omitempty"`
	Update     bool      `json:"update,omitempty"`
}

// serveEvents streams the wake's progress as SSE ("progress" events),
// replaying what happened so far. It ends after the final event, and in
// any case after wake_timeout plus a margin.
func (h *WakeHandler) serveEvents(w http.ResponseWriter, r *http.Request) error {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(e lxc.Event) bool {
		msg := e.Message
		if h.ShowDetails && e.Detail != "" {
			msg = e.Detail
		}
		b, _ := json.Marshal(eventJSON{Time: e.Time, Phase: e.Phase, Message: msg, Progress: e.Progress, RetryAfter: e.RetryAfter.Seconds(), Update: e.Update})
		if _, err := fmt.Fprintf(w, "event: progress\ndata: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	hist, ch, cancel := h.guest.Subscribe()
	defer cancel()
	if _, ready := h.guest.Upstream(h.port); ready {
		send(lxc.Event{Time: time.Now(), Phase: "ready", Message: "Ready", Progress: 100})
		return nil
	}
	for _, e := range hist {
		if !send(e) {
			return nil
		}
		if e.Final {
			return nil
		}
	}
	cfg := h.binding.Config()
	deadline := time.NewTimer(cfg.WakeTimeout + 10*time.Second)
	defer deadline.Stop()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case e := <-ch:
			if !send(e) || e.Final {
				return nil
			}
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil || rc.Flush() != nil {
				return nil
			}
		case <-deadline.C:
			return nil
		case <-r.Context().Done():
			return nil
		}
	}
}

// unavailable answers a request the guest cannot serve now: code (503 or
// 504), Retry-After, Cache-Control: no-store and a short message, as JSON
// for clients that prefer it, else as text. It is never a 200.
func (h *WakeHandler) unavailable(w http.ResponseWriter, r *http.Request, code int, retry time.Duration, msg string) error {
	secs := max(1, int(math.Ceil(retry.Seconds())))
	hd := w.Header()
	hd.Set("Retry-After", strconv.Itoa(secs))
	hd.Set("Cache-Control", "no-store")
	h.setPlaceholders(r, msg, secs)
	if h.UseHandleErrors {
		return caddyhttp.Error(code, errors.New(msg))
	}
	var body []byte
	if strings.Contains(r.Header.Get("Accept"), "json") {
		hd.Set("Content-Type", "application/json")
		ans := map[string]any{"error": msg, "retry_after": secs}
		if h.ShowDetails {
			ans["guest"] = h.Guest
		}
		body, _ = json.Marshal(ans)
	} else {
		hd.Set("Content-Type", "text/plain; charset=utf-8")
		body = []byte(msg + "\n")
	}
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
	return nil
}
