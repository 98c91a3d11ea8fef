package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/localpg"
)

// CA is a throwaway certificate authority for tests of TLS connections.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  string
}

// NewCA creates a self-signed CA certificate and its key.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("pgtest: generate CA key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pgmirror test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("pgtest: create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("pgtest: parse CA certificate: %v", err)
	}
	return &CA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// PEM returns the CA certificate as PEM text.
func (ca *CA) PEM() string { return ca.pem }

// ServerFiles issues a server certificate for the given DNS names and
// returns it as the server.crt and server.key files of a cluster.
func (ca *CA) ServerFiles(tb testing.TB, dnsNames ...string) map[string][]byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("pgtest: generate server key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatalf("pgtest: create server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("pgtest: encode server key: %v", err)
	}
	return map[string][]byte{
		"server.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"server.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// NewTLSCluster starts a private logical cluster with ssl = on whose server
// certificate, signed by ca, names only the given DNS names (not the IP
// address 127.0.0.1). It is stopped when the test ends.
func NewTLSCluster(tb testing.TB, ca *CA, dnsNames ...string) *localpg.Cluster {
	tb.Helper()
	return newPrivateCluster(tb, localpg.Config{Logical: true, Settings: map[string]string{"ssl": "on"}, Files: ca.ServerFiles(tb, dnsNames...), BinDir: BinDir(tb, SuiteMajor(tb))})
}
