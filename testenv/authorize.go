package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AuthorizeFunc decides whether the caller of r may do what attrs
// describe. Env.Authorize is one; it is meant for the stand-in virt-api
// (kubevirtsim's subresource handler), which must authorize e.g.
// {Group: subresources.kubevirt.io, Resource: virtualmachines,
// Subresource: start, Verb: update} like the real one does.
type AuthorizeFunc func(r *http.Request, attrs authorizationv1.ResourceAttributes) (allowed bool, reason string, err error)

// Authorize asks kube-apiserver, with the credentials of r itself (its
// Authorization header and any Impersonate-* headers, forwarded verbatim),
// whether that identity may do attrs: a SelfSubjectAccessReview. So
// kube-apiserver does the authentication and the impersonation checks, and
// RBAC decides, just as for a request that went through the aggregator.
//
// A bad or missing token gives an *apierrors.StatusError (check it with
// apierrors.IsUnauthorized / IsForbidden); a denial gives allowed=false and
// RBAC's reason with a nil error.
func (e *Env) Authorize(r *http.Request, attrs authorizationv1.ResourceAttributes) (bool, string, error) {
	review := authorizationv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
		Spec:     authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return false, "", err
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost,
		e.APIServerURL+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", bytes.NewReader(body))
	if err != nil {
		return false, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	copyIdentity(req.Header, r.Header)
	resp, err := e.httpClient.Do(req)
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(b, &st) == nil && st.Kind == "Status" {
			return false, st.Message, &apierrors.StatusError{ErrStatus: st}
		}
		return false, "", fmt.Errorf("testenv: SelfSubjectAccessReview: HTTP %d: %s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &review); err != nil {
		return false, "", err
	}
	return review.Status.Allowed, review.Status.Reason, nil
}

// copyIdentity copies the headers that make up the caller's identity.
func copyIdentity(dst, src http.Header) {
	if v := src.Get("Authorization"); v != "" {
		dst.Set("Authorization", v)
	}
	for k, vs := range src {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "Impersonate-") {
			dst[k] = append([]string(nil), vs...)
		}
	}
}
