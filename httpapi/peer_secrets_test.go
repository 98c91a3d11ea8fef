package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestPeerSecretsNotInCatalog creates and changes peers through the API and
// then searches every column of every catalog table for the secrets.
func TestPeerSecretsNotInCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ensurePeerRole(t, pgtest.SourceCluster(t))
	ca := pgtest.NewCA(t)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "plain"), "ssl_mode", "disable"), http.StatusCreated)
	raw := b.mustDo(http.MethodPost, "/v1/peers", b.adminToken,
		with(with(validPeer(t, "with-ca"), "ssl_mode", "verify-full"), "ssl_root_cert", ca.PEM()), http.StatusCreated)
	require.NotContains(t, string(raw), "BEGIN CERTIFICATE", "the CA certificate is write-only")
	var created map[string]any
	require.NoError(t, json.Unmarshal(raw, &created))
	require.Equal(t, true, created["has_ssl_root_cert"])
	require.NotContains(t, created, "password")
	require.NotContains(t, created, "ssl_root_cert")
	b.mustDo(http.MethodPut, "/v1/peers/with-ca", b.adminToken, map[string]any{"password": peerPassword}, http.StatusOK)

	// The stored password is the one used to connect.
	var test peerTest
	b.mustDecode(http.MethodPost, "/v1/peers/plain/test", b.adminToken, nil, http.StatusOK, &test)
	require.True(t, test.Success, test.Error)

	jwt, err := b.store.JWTSecret(context.Background())
	require.NoError(t, err)
	for what, secret := range map[string]string{
		"peer password": peerPassword, "JWT secret": base64.StdEncoding.EncodeToString(jwt),
		"CA certificate": strings.Split(ca.PEM(), "\n")[1],
	} {
		require.Empty(t, pgtest.FindText(t, b.pool, secret), "the %s is stored in clear text", what)
	}

	var list []map[string]any
	b.mustDecode(http.MethodGet, "/v1/peers", b.viewerToken, nil, http.StatusOK, &list)
	require.Len(t, list, 2)
	require.Equal(t, false, list[0]["has_ssl_root_cert"], list[0]["name"])
	require.Equal(t, true, list[1]["has_ssl_root_cert"], list[1]["name"])
}

func TestPeerSSLRootCertValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := validPeer(t, "p")
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, with(base, "ssl_root_cert", "not a certificate"),
		http.StatusBadRequest, "ssl_root_cert", "no PEM certificate found")
	broken := "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, with(base, "ssl_root_cert", broken),
		http.StatusBadRequest, "ssl_root_cert", "not a valid X.509 certificate")
	serverFiles := pgtest.NewCA(t).ServerFiles(t, "localhost")
	msg := b.requireError(http.MethodPost, "/v1/peers", b.adminToken, with(base, "ssl_root_cert", string(serverFiles["server.key"])),
		http.StatusBadRequest, "PRIVATE KEY", "not a CERTIFICATE")
	require.NotContains(t, msg, "BEGIN", "the error must not echo the key")
	b.mustDo(http.MethodGet, "/v1/peers/p", b.viewerToken, nil, http.StatusNotFound)

	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(base, "ssl_root_cert", pgtest.NewCA(t).PEM()), http.StatusCreated)
	b.requireError(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"ssl_root_cert": "garbage"},
		http.StatusBadRequest, "ssl_root_cert")
	var p map[string]any
	b.mustDecode(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"ssl_root_cert": ""}, http.StatusOK, &p)
	require.Equal(t, false, p["has_ssl_root_cert"], "an empty ssl_root_cert removes it")
}

// TestPeerVerifyFullWithCA connects to a cluster whose server certificate
// is signed by a CA of the test's own, named for localhost only.
func TestPeerVerifyFullWithCA(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ca := pgtest.NewCA(t)
	c := pgtest.NewTLSCluster(t, ca, "localhost")
	ensurePeerRole(t, c)
	peer := map[string]any{"name": "tls", "host": "localhost", "port": c.Port(), "user": peerRole,
		"password": peerPassword, "database": "postgres", "ssl_mode": "verify-full"}
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, peer, http.StatusCreated)
	check := func(name string) peerTest {
		t.Helper()
		var out peerTest
		b.mustDecode(http.MethodPost, "/v1/peers/"+name+"/test", b.adminToken, nil, http.StatusOK, &out)
		return out
	}

	// Without the CA the system trust store does not know the certificate.
	out := check("tls")
	require.False(t, out.Success)
	require.Contains(t, out.Error, "certificate")
	require.Contains(t, out.Error, "set ssl_root_cert")
	b.requireError(http.MethodGet, "/v1/peers/tls/tables", b.viewerToken, nil, http.StatusBadRequest, "certificate", "ssl_root_cert")

	// With it, verify-full succeeds.
	b.mustDo(http.MethodPut, "/v1/peers/tls", b.adminToken, map[string]any{"ssl_root_cert": ca.PEM()}, http.StatusOK)
	out = check("tls")
	require.True(t, out.Success, out.Error)
	b.mustDo(http.MethodGet, "/v1/peers/tls/tables", b.viewerToken, nil, http.StatusOK)

	// A CA that did not sign the certificate is refused.
	b.mustDo(http.MethodPut, "/v1/peers/tls", b.adminToken, map[string]any{"ssl_root_cert": pgtest.NewCA(t).PEM()}, http.StatusOK)
	out = check("tls")
	require.False(t, out.Success)
	require.Contains(t, out.Error, "check that ssl_root_cert holds the CA")

	// By IP address the host name does not match: verify-full refuses,
	// verify-ca (chain only) accepts.
	byIP := with(with(with(peer, "name", "tls-ip"), "host", "127.0.0.1"), "ssl_root_cert", ca.PEM())
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, byIP, http.StatusCreated)
	out = check("tls-ip")
	require.False(t, out.Success)
	require.Contains(t, out.Error, `does not name host "127.0.0.1"`)
	b.mustDo(http.MethodPut, "/v1/peers/tls-ip", b.adminToken, map[string]any{"ssl_mode": "verify-ca"}, http.StatusOK)
	out = check("tls-ip")
	require.True(t, out.Success, out.Error)
}
