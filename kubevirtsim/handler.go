package kubevirtsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubevirt"
)

// SubresourceGroup is the API group virt-api serves.
const SubresourceGroup = "subresources.kubevirt.io"

const (
	groupPath    = "/apis/" + SubresourceGroup
	maxBodyBytes = 1 << 20
)

// subresourceVersions are the versions virt-api serves, preferred first.
var subresourceVersions = []string{"v1", "v1alpha3"}

// Authorizer decides whether the caller of r may perform verb on
// resource/subresource of the named object in the subresources.kubevirt.io
// group. It returns nil when allowed, otherwise an error that is written to
// the client (an *apierrors.StatusError such as a 403 Forbidden or 401
// Unauthorized; any other error becomes a 500).
type Authorizer func(r *http.Request, verb, resource, subresource, ns, name string) error

// IsSubresourcePath reports whether an API path belongs to the
// subresources.kubevirt.io group and must be served by the handler from
// NewSubresourceHandler instead of the API server.
func IsSubresourcePath(p string) bool {
	return p == groupPath || strings.HasPrefix(p, groupPath+"/")
}

// NewSubresourceHandler serves the part of virt-api's aggregated API that
// the simulator implements, on the paths kube-apiserver would proxy to
// virt-api:
//
//	GET /apis/subresources.kubevirt.io                       APIGroup (as the aggregator serves it)
//	GET /apis/subresources.kubevirt.io/{v1,v1alpha3}         APIResourceList (as virt-api serves it)
//	GET /apis/subresources.kubevirt.io/{version}/version     KubeVirt version info
//	PUT .../namespaces/{ns}/virtualmachines/{name}/{start,stop,restart,migrate}
//	PUT .../namespaces/{ns}/virtualmachineinstances/{name}/{pause,unpause,softreboot,reset}
//	GET .../namespaces/{ns}/virtualmachineinstances/{name}/{vnc,console}  websockets (ConsoleServer)
//
// Request bodies are the JSON options the generated client sends. Every
// subresource request is first authorized with authorize (as kube-apiserver
// does for aggregated APIs, verb from the HTTP method); a nil authorize
// allows everything. Errors are JSON metav1.Status objects with virt-api's
// codes; other subresources answer 404, unsupported methods 405.
func NewSubresourceHandler(kv kubevirt.Interface, authorize Authorizer) http.Handler {
	return &subresourceHandler{sub: &Subresources{KV: kv}, authorize: authorize, console: NewConsoleServer(kv)}
}

type subresourceHandler struct {
	sub       *Subresources
	authorize Authorizer
	console   *ConsoleServer
}

func (h *subresourceHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if !IsSubresourcePath(p) {
		writeStatus(w, notFound())
		return
	}
	var parts []string
	if rest := strings.Trim(strings.TrimPrefix(p, groupPath), "/"); rest != "" {
		parts = strings.Split(rest, "/")
	}
	switch {
	case len(parts) == 0:
		h.discovery(w, r, apiGroup())
	case len(parts) == 1 && isSubresourceVersion(parts[0]):
		h.discovery(w, r, apiResourceList(parts[0]))
	case len(parts) == 2 && isSubresourceVersion(parts[0]) && parts[1] == "version":
		h.discovery(w, r, versionInfo())
	case len(parts) == 2 && isSubresourceVersion(parts[0]) && parts[1] == "healthz":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeStatus(w, methodNotAllowed(r.Method))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "OK")
	case len(parts) >= 6 && isSubresourceVersion(parts[0]) && parts[1] == "namespaces" &&
		parts[2] != "" && parts[4] != "":
		h.subresource(w, r, parts[2], parts[3], parts[4], strings.Join(parts[5:], "/"))
	default:
		writeStatus(w, notFound())
	}
}

func (h *subresourceHandler) discovery(w http.ResponseWriter, r *http.Request, body any) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, methodNotAllowed(r.Method))
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (h *subresourceHandler) subresource(w http.ResponseWriter, r *http.Request, ns, resource, name, sub string) {
	if h.authorize != nil {
		if err := h.authorize(r, requestVerb(r.Method), resource, sub, ns, name); err != nil {
			writeStatus(w, err)
			return
		}
	}
	ctx := r.Context()
	route := resource + "/" + sub
	if route == "virtualmachineinstances/vnc" || route == "virtualmachineinstances/console" {
		h.console.ServeHTTP(w, r)
		return
	}
	status := http.StatusOK
	var err error
	switch route {
	case "virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart", "virtualmachines/migrate":
		status = http.StatusAccepted
	case "virtualmachineinstances/pause", "virtualmachineinstances/unpause",
		"virtualmachineinstances/softreboot", "virtualmachineinstances/reset":
	default:
		writeStatus(w, notSimulated(route))
		return
	}
	if r.Method != http.MethodPut {
		writeStatus(w, methodNotAllowed(r.Method))
		return
	}
	switch route {
	case "virtualmachines/start":
		opts := &virtv1.StartOptions{}
		if err = decodeBody(r, opts); err == nil {
			err = h.sub.Start(ctx, ns, name, opts)
		}
	case "virtualmachines/stop":
		opts := &virtv1.StopOptions{}
		if err = decodeBody(r, opts); err == nil {
			err = h.sub.Stop(ctx, ns, name, opts)
		}
	case "virtualmachines/restart":
		opts := &virtv1.RestartOptions{}
		if err = decodeBody(r, opts); err == nil {
			err = h.sub.Restart(ctx, ns, name, opts)
		}
	case "virtualmachines/migrate":
		opts := &virtv1.MigrateOptions{}
		if err = decodeBody(r, opts); err == nil {
			err = h.sub.Migrate(ctx, ns, name, opts)
		}
	case "virtualmachineinstances/pause":
		opts := &virtv1.PauseOptions{}
		if err = decodeBody(r, opts); err == nil {
			err = h.sub.PauseWithOptions(ctx, ns, name, opts)
		}
	case "virtualmachineinstances/unpause":
		opts := &virtv1.UnpauseOptions{}
		if err = decodeBody(r, opts); err == nil {
			err = h.sub.UnpauseWithOptions(ctx, ns, name, opts)
		}
	case "virtualmachineinstances/softreboot":
		err = h.sub.SoftReboot(ctx, ns, name)
	case "virtualmachineinstances/reset":
		err = h.sub.Reset(ctx, ns, name)
	}
	if err != nil {
		writeStatus(w, err)
		return
	}
	w.WriteHeader(status)
}

// decodeBody reads the JSON (or YAML) options; an empty body is fine.
func decodeBody(r *http.Request, into any) error {
	if r.Body == nil {
		return nil
	}
	defer r.Body.Close()
	err := utilyaml.NewYAMLOrJSONDecoder(io.LimitReader(r.Body, maxBodyBytes), 1024).Decode(into)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	return apierrors.NewBadRequest(fmt.Sprintf(msgUnmarshalBody, err))
}

func requestVerb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPost:
		return "create"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return strings.ToLower(method)
}

func isSubresourceVersion(v string) bool {
	for _, s := range subresourceVersions {
		if v == s {
			return true
		}
	}
	return false
}

// apiGroup is the group document kube-apiserver's aggregator serves for the
// APIServices virt-operator registers.
func apiGroup() *metav1.APIGroup {
	g := &metav1.APIGroup{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:     SubresourceGroup,
	}
	for _, v := range subresourceVersions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: SubresourceGroup + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// apiResourceList is virt-api's resource list for a version (names only, as
// virt-api publishes them).
func apiResourceList(version string) *metav1.APIResourceList {
	names := []string{
		"expand-vm-spec",
		"virtualmachineinstances/vnc",
		"virtualmachineinstances/vnc/screenshot",
		"virtualmachineinstances/console",
		"virtualmachineinstances/portforward",
		"virtualmachineinstances/backup",
		"virtualmachineinstances/redefine-checkpoint",
		"virtualmachineinstances/pause",
		"virtualmachineinstances/unpause",
		"virtualmachineinstances/freeze",
		"virtualmachineinstances/unfreeze",
		"virtualmachineinstances/reset",
		"virtualmachineinstances/softreboot",
		"virtualmachines/start",
		"virtualmachines/stop",
		"virtualmachines/restart",
		"virtualmachines/migrate",
		"virtualmachines/expand-spec",
		"virtualmachines/objectgraph",
		"virtualmachines/evacuate/cancel",
		"virtualmachineinstances/guestosinfo",
		"virtualmachineinstances/userlist",
		"virtualmachineinstances/filesystemlist",
		"virtualmachineinstances/addvolume",
		"virtualmachineinstances/removevolume",
		"virtualmachineinstances/objectgraph",
		"virtualmachineinstances/sev/fetchcertchain",
		"virtualmachineinstances/sev/querylaunchmeasurement",
		"virtualmachineinstances/sev/setupsession",
		"virtualmachineinstances/sev/injectlaunchsecret",
		"virtualmachineinstances/evacuate/cancel",
	}
	l := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: SubresourceGroup + "/" + version,
	}
	for _, n := range names {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: n, Namespaced: true})
	}
	return l
}

// versionInfo mirrors virt-api's version endpoint (kubevirt.io/client-go/version.Info).
func versionInfo() any {
	return map[string]string{
		"gitVersion":   kubevirtVersion,
		"gitCommit":    "",
		"gitTreeState": "clean",
		"buildDate":    "1970-01-01T00:00:00Z",
		"goVersion":    "go1.24.9",
		"compiler":     "gc",
		"platform":     "linux/amd64",
	}
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// writeStatus writes err as a metav1.Status with its HTTP code.
func writeStatus(w http.ResponseWriter, err error) {
	var st metav1.Status
	var apiStatus apierrors.APIStatus
	if errors.As(err, &apiStatus) {
		st = apiStatus.Status()
	} else {
		st = apierrors.NewInternalError(err).Status()
	}
	st.Kind, st.APIVersion = "Status", "v1"
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	writeJSON(w, int(st.Code), st)
}

func notFound() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
	}}
}

func methodNotAllowed(method string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed, Reason: metav1.StatusReasonMethodNotAllowed,
		Message: fmt.Sprintf("the server does not allow this method on the requested resource: %s", method),
	}}
}

// SelfSubjectAccessAuthorizer returns an Authorizer that asks the API
// server described by base (its host and TLS settings; its own credentials
// are not used) whether the caller may perform the request, the way
// kube-apiserver authorizes requests before proxying them to virt-api. The
// caller is identified by the request's "Authorization: Bearer" token and
// any Impersonate-User/-Group/-Uid/-Extra-* headers, and a
// SelfSubjectAccessReview is made for group subresources.kubevirt.io. A
// denial becomes kube-apiserver's 403 ("... is forbidden: User "x" cannot
// update resource "virtualmachines/start" in API group
// "subresources.kubevirt.io" in the namespace "ns""), a rejected token 401.
func SelfSubjectAccessAuthorizer(base *rest.Config) Authorizer {
	return SelfSubjectAccessAuthorizerFor(base, SubresourceGroup)
}

// SelfSubjectAccessAuthorizerFor is SelfSubjectAccessAuthorizer for the
// resources of another aggregated API group (UploadGroup).
func SelfSubjectAccessAuthorizerFor(base *rest.Config, group string) Authorizer {
	return func(r *http.Request, verb, resource, subresource, ns, name string) error {
		cfg := rest.AnonymousClientConfig(base)
		if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			cfg.BearerToken = strings.TrimSpace(auth[7:])
		}
		cfg.Impersonate = impersonationFrom(r.Header)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   ns,
				Verb:        verb,
				Group:       group,
				Version:     "v1",
				Resource:    resource,
				Subresource: subresource,
				Name:        name,
			},
		}}
		res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(r.Context(), review, metav1.CreateOptions{})
		reason := ""
		switch {
		case apierrors.IsUnauthorized(err):
			return apierrors.NewUnauthorized("Unauthorized")
		case apierrors.IsForbidden(err):
			// Not even allowed to ask: certainly not allowed to act.
		case err != nil:
			return apierrors.NewInternalError(fmt.Errorf("authorizing request: %w", err))
		case res.Status.Allowed:
			return nil
		default:
			reason = res.Status.Reason
		}
		// The user name for the message; without credentials the API
		// server treats the caller as anonymous.
		user := ""
		if cfg.BearerToken == "" && cfg.Impersonate.UserName == "" {
			user = "system:anonymous"
		}
		if ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(r.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
			user = ssr.Status.UserInfo.Username
		}
		return forbidden(group, user, verb, resource, subresource, ns, name, reason)
	}
}

// Forbidden builds the 403 error kube-apiserver returns when authorization
// of a subresources.kubevirt.io request fails.
func Forbidden(user, verb, resource, subresource, ns, name, reason string) error {
	return forbidden(SubresourceGroup, user, verb, resource, subresource, ns, name, reason)
}

func forbidden(group, user, verb, resource, subresource, ns, name, reason string) error {
	res := resource
	if subresource != "" {
		res += "/" + subresource
	}
	msg := fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", user, verb, res, group, ns)
	if reason != "" {
		msg += ": " + reason
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: resource}, name, errors.New(msg))
}

// impersonationFrom reads kube-apiserver's impersonation headers.
func impersonationFrom(h http.Header) rest.ImpersonationConfig {
	imp := rest.ImpersonationConfig{
		UserName: h.Get("Impersonate-User"),
		UID:      h.Get("Impersonate-Uid"),
		Groups:   h.Values("Impersonate-Group"),
	}
	for key, values := range h {
		canonical := http.CanonicalHeaderKey(key)
		const prefix = "Impersonate-Extra-"
		if !strings.HasPrefix(canonical, prefix) {
			continue
		}
		extraKey := strings.ToLower(key[len(prefix):])
		if k, err := url.PathUnescape(extraKey); err == nil {
			extraKey = k
		}
		if imp.Extra == nil {
			imp.Extra = map[string][]string{}
		}
		imp.Extra[extraKey] = append(imp.Extra[extraKey], values...)
	}
	return imp
}
