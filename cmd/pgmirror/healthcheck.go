package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// healthcheck is `pgmirror healthcheck`: it asks the service on this host
// (SERVICE_PORT, HTTPS when SERVICE_TLS_CERT_FILE is set) for /health and
// fails unless it answers 200 within 5 s. It is the container image's
// HEALTHCHECK, which has no shell or curl; it reads no other configuration.
func healthcheck(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	port := 8112
	if p := getenv("SERVICE_PORT"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("SERVICE_PORT=%q: use a port number from 1 to 65535", p)
		}
		port = n
	}
	scheme, client := "http", &http.Client{Timeout: 5 * time.Second}
	if getenv("SERVICE_TLS_CERT_FILE") != "" {
		// The certificate names the service's public host, not 127.0.0.1:
		// this only checks that the local process answers.
		scheme = "https"
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // loopback liveness check
	}
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s://127.0.0.1:%d/health", scheme, port), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check: /health answered %d", resp.StatusCode)
	}
	fmt.Fprintln(stdout, "healthy")
	return nil
}
