package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// writeSelfSignedCert writes a certificate for 127.0.0.1 and its key into
// dir and returns their paths and a pool that trusts the certificate.
func writeSelfSignedCert(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "pgmirror test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// TestHTTPSAndIdleTimeout starts pgmirror with a certificate and a short
// idle timeout: it serves the API over HTTPS (and not over plain HTTP), and
// closes a keep-alive connection that stays idle.
func TestHTTPSAndIdleTimeout(t *testing.T) {
	t.Parallel()
	certFile, keyFile, roots := writeSelfSignedCert(t, t.TempDir())
	s := launchService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)),
		"SERVICE_TLS_CERT_FILE="+certFile, "SERVICE_TLS_KEY_FILE="+keyFile, "SERVICE_HTTP_IDLE_TIMEOUT=1s")
	httpsURL := strings.Replace(s.baseURL, "http://", "https://", 1)
	tlsConfig := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 10 * time.Second}

	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := client.Get(httpsURL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgmirror did not answer over HTTPS: %v\n%s", err, s.output.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := client.Post(httpsURL+"/v1/auth/login", "application/json",
		strings.NewReader(`{"username":"admin","password":"`+testAdminPassword+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var login struct{ Token string }
	err = json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || login.Token == "" {
		t.Fatalf("login over HTTPS: status %d, err %v", resp.StatusCode, err)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("login was not answered over TLS 1.2+: %+v", resp.TLS)
	}
	// Plain HTTP on the HTTPS port is refused.
	if resp, err := http.Get(s.baseURL + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served on the HTTPS port")
		}
	}

	// A keep-alive connection: one request, then silence.
	conn, err := tls.Dial("tcp", strings.TrimPrefix(httpsURL, "https://"), tlsConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: pgmirror\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	health, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, health.Body)
	health.Body.Close()
	if health.StatusCode != http.StatusOK || health.Close {
		t.Fatalf("keep-alive request: status %d, close %v", health.StatusCode, health.Close)
	}
	idleSince := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = r.ReadByte()
	idle := time.Since(idleSince)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the idle connection was still open after %s (SERVICE_HTTP_IDLE_TIMEOUT=1s)", idle)
	}
	if err == nil {
		t.Fatal("the server sent data on an idle connection")
	}
	if idle < 500*time.Millisecond || idle > 5*time.Second {
		t.Fatalf("the idle connection was closed after %s, want about 1s", idle)
	}
}

// TestHTTPConfig checks the startup errors of the HTTP settings: TLS needs
// both files, and they must hold a certificate and its key; a write timeout
// shorter than the slowest request is refused.
func TestHTTPConfig(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	certFile, keyFile, _ := writeSelfSignedCert(t, t.TempDir())

	cfg, err := loadConfig(env())
	if err != nil || cfg.HTTP.certificate != nil || cfg.HTTP.IdleTimeout != 2*time.Minute || cfg.HTTP.WriteTimeout != 2*time.Minute ||
		cfg.HTTP.ReadTimeout != time.Minute || cfg.HTTP.ReadHeaderTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v, %v", cfg.HTTP, err)
	}
	if cfg.HTTP.Host != "" || cfg.AllowSocketPeers || newHTTPServer(cfg.HTTP, 8112, nil).Addr != ":8112" {
		t.Fatalf("by default the API listens on every interface and refuses socket peers: %+v", cfg)
	}
	for _, host := range []string{"127.0.0.1", "::1", "pgmirror.internal"} {
		cfg, err := loadConfig(env("SERVICE_HOST", host, "SERVICE_ALLOW_SOCKET_PEERS", "true"))
		if err != nil || cfg.HTTP.Host != host || !cfg.AllowSocketPeers || newHTTPServer(cfg.HTTP, 8112, nil).Addr != net.JoinHostPort(host, "8112") {
			t.Fatalf("SERVICE_HOST=%s: %+v, %v", host, cfg.HTTP, err)
		}
	}
	if cfg, err := loadConfig(env("SERVICE_TLS_CERT_FILE", certFile, "SERVICE_TLS_KEY_FILE", keyFile)); err != nil || cfg.HTTP.certificate == nil {
		t.Fatalf("both TLS files: %v", err)
	}
	for _, c := range []struct {
		env  func(string) string
		want string
	}{
		{env("SERVICE_TLS_CERT_FILE", certFile), "set both SERVICE_TLS_CERT_FILE and SERVICE_TLS_KEY_FILE"},
		{env("SERVICE_TLS_KEY_FILE", keyFile), "set both SERVICE_TLS_CERT_FILE and SERVICE_TLS_KEY_FILE"},
		{env("SERVICE_TLS_CERT_FILE", certFile, "SERVICE_TLS_KEY_FILE", certFile), "load the TLS certificate"},
		{env("SERVICE_TLS_CERT_FILE", "/nonexistent/cert.pem", "SERVICE_TLS_KEY_FILE", keyFile), "/nonexistent/cert.pem"},
		{env("SERVICE_HTTP_WRITE_TIMEOUT", "10s"), "SERVICE_HTTP_WRITE_TIMEOUT=10s is too short"},
		{env("SERVICE_HTTP_IDLE_TIMEOUT", "soon"), "SERVICE_HTTP_IDLE_TIMEOUT"},
		{env("SERVICE_HOST", "127.0.0.1:8112"), "SERVICE_HOST=\"127.0.0.1:8112\": use an IP address or a host name"},
		{env("SERVICE_HOST", "a b"), "SERVICE_HOST"},
		{env("SERVICE_ALLOW_SOCKET_PEERS", "maybe"), "SERVICE_ALLOW_SOCKET_PEERS=\"maybe\": use true or false"},
	} {
		if _, err := loadConfig(c.env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error containing %q, got %v", c.want, err)
		}
	}
}
