package kubevirtsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v3"
	"github.com/go-jose/go-jose/v3/jwt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
)

// cdiToken signs a token as cdi-apiserver does (CDI pkg/token Generate).
func cdiToken(t *testing.T, key *rsa.PrivateKey, issuer, op, ns, pvc string, expires time.Time) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.PS256, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p cdiPayload
	p.Operation, p.Name, p.Namespace = op, pvc, ns
	p.Resource.Version, p.Resource.Resource = "v1", "persistentvolumeclaims"
	now := time.Now()
	tok, err := jwt.Signed(signer).Claims(p).Claims(&jwt.Claims{Issuer: issuer, IssuedAt: jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(expires)}).CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCDIUploadProxy: with CDI's own API server, the proxy takes
// cdi-apiserver's tokens (its key from cdi-api-signing-key) and no other,
// takes an upload populator's target on its prime claim, and leaves the
// claim's pod phase to CDI's controller.
func TestCDIUploadProxy(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	upload := map[string]string{AnnotationUploadTarget: "", AnnotationPodReady: "true"}
	k8s := k8sfake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: cdiAPISigningKey, Namespace: "cdi"},
			Data: map[string][]byte{"id_rsa.pub": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "target", Namespace: "ns", UID: "u1",
			Annotations: map[string]string{annPVCPrimeName: "prime-u1"}},
			Spec: corev1.PersistentVolumeClaimSpec{DataSourceRef: &corev1.TypedObjectReference{
				APIGroup: ptr("cdi.kubevirt.io"), Kind: "VolumeUploadSource", Name: "volume-upload-source-u1"}}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "prime-u1", Namespace: "ns", Annotations: upload},
			Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}},
	)
	ctx := context.Background()
	pubKey, err := CDIUploadTokenKey(ctx, k8s, "cdi")
	if err != nil {
		t.Fatal(err)
	}
	up := NewCDIUploadProxy(k8s, pubKey)
	later := time.Now().Add(5 * time.Minute)
	for _, c := range []struct {
		name, token string
		want        int
	}{
		{"other key", cdiToken(t, other, cdiUploadTokenIssuer, "Upload", "ns", "target", later), 401},
		{"other issuer", cdiToken(t, key, "cdi-deployment", "Upload", "ns", "target", later), 401},
		{"expired", cdiToken(t, key, cdiUploadTokenIssuer, "Upload", "ns", "target", time.Now().Add(-time.Minute)), 401},
		{"the proxy's own", NewUploadProxy(k8s).Token("ns", "target"), 401},
		{"clone token", cdiToken(t, key, cdiUploadTokenIssuer, "Clone", "ns", "target", later), 400},
	} {
		if code, body := post(t, up, "POST", "/v1beta1/upload", c.token, "", strings.NewReader("x")); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}

	data := bytes.Repeat([]byte("a"), 4096)
	tok := cdiToken(t, key, cdiUploadTokenIssuer, "Upload", "ns", "target", later)
	if code, body := post(t, up, "POST", "/v1beta1/upload", tok, "", bytes.NewReader(data)); code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	prime, _ := k8s.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "prime-u1", metav1.GetOptions{})
	if prime.Annotations[AnnotationUploadedBytes] != "4096" || prime.Annotations[annPodPhase] != "" || prime.Annotations[AnnotationPodReady] != "true" {
		t.Fatalf("prime claim after the upload: %v (want the bytes recorded, the pod's state left to CDI)", prime.Annotations)
	}
}
