package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the throw-away certificates of one environment:
//   - a CA that signs the serving certificates of kube-apiserver, the front
//     proxies and virt-api (so one CA bundle trusts all of them; it is the
//     caBundle of KubeVirt's webhooks and APIService);
//   - the front-proxy CA of the aggregation layer (kube-apiserver
//     --requestheader-client-ca-file), which signs the client certificate
//     kube-apiserver presents to virt-api;
//   - the KubeVirt CA (ConfigMap kubevirt/kubevirt-ca, as virt-operator
//     keeps it), which signs virt-handler's serving certificate and
//     virt-api's client certificate towards virt-handler;
//   - the service account key pair.
type pki struct {
	ca       *authority
	caPEM    []byte
	serving  tls.Certificate // for 127.0.0.1 / localhost; used by the proxy
	certFile string          // kube-apiserver --tls-cert-file
	keyFile  string          // kube-apiserver --tls-private-key-file
	saPub    string          // --service-account-key-file
	saKey    string          // --service-account-signing-key-file

	frontProxy *authority
	kubevirt   *authority
	// kube-apiserver --requestheader-client-ca-file and
	// --proxy-client-cert-file/--proxy-client-key-file.
	frontProxyCAFile, proxyClientCertFile, proxyClientKeyFile string
}

// authority is a certificate authority of the environment.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// FrontProxyClientName is the CommonName of the client certificate
// kube-apiserver presents to aggregated API servers
// (--requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

func newAuthority(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// leaf describes a certificate that an authority signs.
type leaf struct {
	cn    string
	usage x509.ExtKeyUsage
	dns   []string
	ips   []net.IP
}

// sign issues the certificate l and returns it and its key in PEM.
func (a *authority) sign(l leaf) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: l.cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{l.usage},
		DNSNames:     l.dns,
		IPAddresses:  l.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: sign %s certificate: %w", l.cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// signFiles issues l and writes it to dir/name.crt and dir/name.key.
func (a *authority) signFiles(dir, name string, l leaf) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := a.sign(l)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}

func (a *authority) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(a.cert)
	return pool
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err)
	}
	return n
}

func newPKI(dir string) (*pki, error) {
	p := &pki{}
	var err error
	if p.ca, err = newAuthority("caddy-proxmox testenv CA"); err != nil {
		return nil, err
	}
	p.caPEM = p.ca.pem
	p.certFile, p.keyFile, err = p.ca.signFiles(dir, "apiserver", p.servingLeaf("kube-apiserver"))
	if err != nil {
		return nil, err
	}
	proxyCert, proxyKey, err := p.ca.sign(p.servingLeaf("testenv front proxy"))
	if err != nil {
		return nil, err
	}
	if p.serving, err = tls.X509KeyPair(proxyCert, proxyKey); err != nil {
		return nil, err
	}

	// The aggregation layer: kube-apiserver authenticates to aggregated
	// API servers (virt-api) with a client certificate of this CA.
	if p.frontProxy, err = newAuthority("caddy-proxmox testenv front-proxy CA"); err != nil {
		return nil, err
	}
	p.frontProxyCAFile = filepath.Join(dir, "front-proxy-ca.crt")
	if err := os.WriteFile(p.frontProxyCAFile, p.frontProxy.pem, 0o600); err != nil {
		return nil, err
	}
	if p.proxyClientCertFile, p.proxyClientKeyFile, err = p.frontProxy.signFiles(dir, "front-proxy-client",
		leaf{cn: FrontProxyClientName, usage: x509.ExtKeyUsageClientAuth}); err != nil {
		return nil, err
	}
	if p.kubevirt, err = newAuthority("caddy-proxmox testenv KubeVirt CA"); err != nil {
		return nil, err
	}

	// kube-apiserver signs service account tokens with this RSA key.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saPub = filepath.Join(dir, "sa.pub")
	p.saKey = filepath.Join(dir, "sa.key")
	if err := os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// servingLeaf is a serving certificate for the loopback addresses and the
// in-cluster names of the kubernetes service.
func (p *pki) servingLeaf(cn string) leaf {
	return leaf{cn: cn, usage: x509.ExtKeyUsageServerAuth,
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		ips: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	}
}

func (p *pki) certPool() *x509.CertPool { return p.ca.pool() }
