package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/pgmirror/pgmirror/httpapi"
)

// httpConfig is the HTTP server's configuration: its timeouts and optional
// TLS certificate (docs/configuration.md).
type httpConfig struct {
	// Host is the address the API listens on (SERVICE_HOST): an IP address
	// or a host name; empty listens on every interface.
	Host string
	// ReadHeaderTimeout bounds reading a request's headers, ReadTimeout the
	// whole request with its body.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of the response. The slowest requests connect to a peer (10 s connect
	// timeout) and query it (30 s): creating a mirror, replacing its tables,
	// listing a peer's tables.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has no request for
	// this long.
	IdleTimeout time.Duration
	// TLSCertFile and TLSKeyFile are PEM files; both set serves HTTPS.
	TLSCertFile string
	TLSKeyFile  string
	// certificate is loaded from the files by loadHTTPConfig.
	certificate *tls.Certificate
}

// slowestRequest is how long the slowest API request can take: a peer
// connection (10 s) and a query on it (30 s), plus catalog work.
const slowestRequest = 45 * time.Second

func loadHTTPConfig(getenv func(string) string) (httpConfig, error) {
	cfg := httpConfig{Host: getenv("SERVICE_HOST"), TLSCertFile: getenv("SERVICE_TLS_CERT_FILE"), TLSKeyFile: getenv("SERVICE_TLS_KEY_FILE")}
	if cfg.Host != "" && !httpapi.ValidHost(cfg.Host) {
		return cfg, fmt.Errorf("SERVICE_HOST=%q: use an IP address or a host name to listen on (without a port: that is SERVICE_PORT), or leave it unset to listen on every interface", cfg.Host)
	}
	var err error
	for _, v := range []struct {
		name string
		def  time.Duration
		dst  *time.Duration
	}{
		{"SERVICE_HTTP_READ_HEADER_TIMEOUT", 10 * time.Second, &cfg.ReadHeaderTimeout},
		{"SERVICE_HTTP_READ_TIMEOUT", 60 * time.Second, &cfg.ReadTimeout},
		{"SERVICE_HTTP_WRITE_TIMEOUT", 2 * time.Minute, &cfg.WriteTimeout},
		{"SERVICE_HTTP_IDLE_TIMEOUT", 2 * time.Minute, &cfg.IdleTimeout},
	} {
		if *v.dst, err = durationVar(getenv, v.name, v.def); err != nil {
			return cfg, err
		}
	}
	if cfg.WriteTimeout < slowestRequest {
		return cfg, fmt.Errorf("SERVICE_HTTP_WRITE_TIMEOUT=%s is too short: requests that check a peer take up to %s; use at least that", cfg.WriteTimeout, slowestRequest)
	}
	if (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == "") {
		return cfg, errors.New("set both SERVICE_TLS_CERT_FILE and SERVICE_TLS_KEY_FILE to serve HTTPS, or neither to serve plain HTTP")
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("load the TLS certificate (SERVICE_TLS_CERT_FILE=%s, SERVICE_TLS_KEY_FILE=%s): %w", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
		cfg.certificate = &cert
	}
	return cfg, nil
}

// newHTTPServer returns the API's server on cfg's host and port with its timeouts and,
// when cfg has a certificate, TLS with it.
func newHTTPServer(cfg httpConfig, port int, handler http.Handler) *http.Server {
	server := &http.Server{
		Addr:              net.JoinHostPort(cfg.Host, strconv.Itoa(port)),
		Handler:           handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		// The API answers more than httpapi.MaxHeaderBytes with a JSON 431;
		// net/http's own (plain text) 431 only comes far above it.
		MaxHeaderBytes: 16 * httpapi.MaxHeaderBytes,
	}
	if cfg.certificate != nil {
		server.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cfg.certificate}, MinVersion: tls.VersionTLS12}
	}
	return server
}

// serveHTTP serves on listener until the server is shut down, over TLS when
// the server has a certificate.
func serveHTTP(server *http.Server, listener net.Listener) error {
	if server.TLSConfig != nil {
		return server.ServeTLS(listener, "", "")
	}
	return server.Serve(listener)
}
