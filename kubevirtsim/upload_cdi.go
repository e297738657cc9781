package kubevirtsim

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

const (
	// cdiAPISigningKey is the secret of the key pair cdi-apiserver signs
	// its tokens with (CDI pkg/apiserver APISigningKeySecretName);
	// cdi-uploadproxy gets the public half as APISERVER_PUBLIC_KEY.
	cdiAPISigningKey = "cdi-api-signing-key"
	// cdiUploadTokenIssuer is the issuer of upload tokens (CDI
	// pkg/common UploadTokenIssuer).
	cdiUploadTokenIssuer = "cdi-apiserver"
	// annPVCPrimeName names the claim an upload populator fills for a
	// target claim (CDI pkg/controller/common AnnPVCPrimeName).
	annPVCPrimeName = "cdi.kubevirt.io/storage.populator.pvcPrime"
)

// CDIUploadTokenKey reads the public key cdi-apiserver's upload tokens are
// checked with from the cdi-api-signing-key secret of CDI's namespace ns.
func CDIUploadTokenKey(ctx context.Context, k8s kubernetes.Interface, ns string) (*rsa.PublicKey, error) {
	s, err := k8s.CoreV1().Secrets(ns).Get(ctx, cdiAPISigningKey, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(s.Data["id_rsa.pub"])
	if block == nil {
		return nil, fmt.Errorf("secret %s/%s: no PEM public key in id_rsa.pub", ns, cdiAPISigningKey)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", ns, cdiAPISigningKey, err)
	}
	rsaKey, ok := key.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("secret %s/%s: not an RSA key", ns, cdiAPISigningKey)
	}
	return rsaKey, nil
}

// NewCDIUploadProxy returns an upload proxy for a cluster where CDI's own
// API server issues the tokens and CDI's controller runs the upload server
// pods (the real control plane, with Nodes as the kubelet): it checks
// tokens as cdi-uploadproxy does, signed by key (CDIUploadTokenKey) with
// issuer cdi-apiserver; it takes the upload of a claim an upload populator
// fills on its prime claim, as cdi-uploadproxy does; and when the data is
// in, it records what arrived on that claim (AnnotationUploadedSHA256,
// AnnotationUploadedBytes) and leaves the rest to CDI's controller: the
// Nodes kubelet then completes the upload server pod, and CDI marks the
// claim and the DataVolume done. It serves no token API.
func NewCDIUploadProxy(k8s kubernetes.Interface, key *rsa.PublicKey) *UploadProxy {
	u := NewUploadProxy(k8s)
	u.cdi = &cdiTokens{key: key, now: time.Now}
	return u
}

// cdiTokens validates cdi-apiserver's tokens (CDI pkg/token).
type cdiTokens struct {
	key *rsa.PublicKey
	now func() time.Time
}

// cdiPayload is CDI's token payload (CDI pkg/token Payload).
type cdiPayload struct {
	Operation string `json:"operation,omitempty"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Resource  struct {
		Group    string `json:"group"`
		Version  string `json:"version"`
		Resource string `json:"resource"`
	} `json:"resource,omitempty"`
}

func (c *cdiTokens) validate(tok string) (uploadToken, error) {
	parsed, err := jwt.ParseSigned(tok)
	if err != nil {
		return uploadToken{}, err
	}
	if len(parsed.Headers) != 1 || parsed.Headers[0].Algorithm != string(jose.PS256) {
		return uploadToken{}, errors.New("token not signed with PS256")
	}
	var claims jwt.Claims
	var p cdiPayload
	if err := parsed.Claims(c.key, &claims, &p); err != nil {
		return uploadToken{}, err
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: cdiUploadTokenIssuer, Time: c.now()}, uploadTokenLeeway); err != nil {
		return uploadToken{}, err
	}
	t := uploadToken{Operation: p.Operation, Name: p.Name, Namespace: p.Namespace, Resource: p.Resource.Resource}
	if claims.Expiry != nil {
		t.Expires = claims.Expiry.Time().Unix()
	}
	return t, nil
}

// uploadClaim is the claim that takes the upload for the token's claim
// pvc: pvc itself, or the prime claim an upload populator fills for it
// (nil while the populator has not named one yet).
func (u *UploadProxy) uploadClaim(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolumeClaim, error) {
	if u.cdi == nil {
		return pvc, nil
	}
	ref := pvc.Spec.DataSourceRef
	if ref == nil || ref.APIGroup == nil || *ref.APIGroup != cdiv1.SchemeGroupVersion.Group || ref.Kind != "VolumeUploadSource" {
		return pvc, nil
	}
	prime, ok := pvc.Annotations[annPVCPrimeName]
	if !ok {
		return nil, nil
	}
	p, err := u.k8s.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, prime, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("rejecting Upload Request for PVC %s, PVC' wasn't created yet", pvc.Name)
	}
	return p, err
}
