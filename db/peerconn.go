package db

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/session"
)

// peerConnectTimeout bounds the connection attempts to a peer.
const peerConnectTimeout = 10 * time.Second

// ConnConfig returns the connection configuration of the peer: its address,
// user, database and SSL mode, a 10 second connect timeout, the password
// decrypted and, when the peer has a CA certificate and its SSL mode checks
// certificates (require, verify-ca, verify-full), that certificate as the
// only trusted root. It holds the password: never log it. Callers may change
// the returned config; each call returns a new one. Its search_path is
// session.SearchPath (pg_catalog, pg_temp), as on every pgmirror session
// to a peer.
func (p Peer) ConnConfig() (*pgx.ConnConfig, error) {
	if p.keys == nil {
		return nil, fmt.Errorf("connect to peer %q: the peer was not loaded from the catalog", p.Name)
	}
	password, err := p.keys.Open(p.sealedPassword, peerPasswordPlace(p.Name))
	if err != nil {
		return nil, fmt.Errorf("decrypt the password of peer %q: %w", p.Name, err)
	}
	query := url.Values{"sslmode": {string(p.SSLMode)}, "connect_timeout": {strconv.Itoa(int(peerConnectTimeout / time.Second))}}
	u := url.URL{Scheme: "postgres", User: url.User(p.User), Path: "/" + p.Database}
	if strings.HasPrefix(p.Host, "/") {
		// A Unix-socket directory (allowed by SERVICE_ALLOW_SOCKET_PEERS)
		// goes in the query: it cannot stand in a URI's authority.
		query.Set("host", p.Host)
		query.Set("port", strconv.Itoa(p.Port))
	} else {
		u.Host = net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
	}
	u.RawQuery = query.Encode()
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("peer %q: %w", p.Name, err)
	}
	cfg.Password = string(password)
	// session.Connect sets it as well; here it also covers a connection
	// opened from this config some other way.
	cfg.RuntimeParams["search_path"] = session.SearchPath
	if p.sealedRootCert == "" || !checksCertificate(p.SSLMode) {
		return cfg, nil
	}
	pemText, err := p.keys.Open(p.sealedRootCert, peerRootCertPlace(p.Name))
	if err != nil {
		return nil, fmt.Errorf("decrypt the CA certificate of peer %q: %w", p.Name, err)
	}
	roots, err := ParseRootCerts(string(pemText))
	if err != nil {
		return nil, fmt.Errorf("CA certificate of peer %q: %w", p.Name, err)
	}
	cfg.TLSConfig = peerTLS(p.SSLMode, p.Host, roots)
	cfg.Fallbacks = nil // never fall back to a connection that skips the check
	return cfg, nil
}

// checksCertificate reports whether an SSL mode verifies the server
// certificate when a CA certificate is given. As in libpq, require with a
// root certificate behaves like verify-ca.
func checksCertificate(sslMode SSLMode) bool {
	return sslMode == SSLRequire || sslMode == SSLVerifyCA || sslMode == SSLVerifyFull
}

// peerTLS is the TLS configuration that trusts only roots: verify-full checks
// the chain and the host name, verify-ca (and require) the chain only.
func peerTLS(sslMode SSLMode, host string, roots *x509.CertPool) *tls.Config {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if sslMode == SSLVerifyFull {
		cfg.ServerName = host
		return cfg
	}
	if net.ParseIP(host) == nil {
		cfg.ServerName = host // SNI only; the name is not checked
	}
	// Go's own verification always checks the name: skip it and verify the
	// chain in VerifyConnection instead (what libpq's verify-ca does).
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
		}
		return nil
	}
	return cfg
}

// ParseRootCerts reads PEM text holding one or more CERTIFICATE blocks and
// nothing else (a private key pasted by mistake is refused) and returns them
// as a pool of trusted roots.
func ParseRootCerts(pemText string) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	rest := []byte(pemText)
	n := 0
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		n++
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %s, not a CERTIFICATE: give only the CA certificate(s)", n, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d is not a valid X.509 certificate: %w", n, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate found: give the CA certificate as PEM text (-----BEGIN CERTIFICATE----- ...)")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("text after the last PEM certificate is not PEM: give only the CA certificate(s)")
	}
	return pool, nil
}
