package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// profile starts a CPU profile of the pgmirror process, when -pgmirror-pprof
// names its net/http/pprof address, for profileSeconds; the returned
// function waits until it is written to -profile-dir as
// pgmirror-MODE-NAME.pprof. The released pgmirror binary has no pprof endpoint:
// this is for a binary built with one, to see where its time goes.
func (b *bench) profile(ctx context.Context, name string) (wait func()) {
	if b.opts.pprofURL == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.fetchProfile(ctx, name); err != nil {
			b.logf("profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

const profileSeconds = 10

func (b *bench) fetchProfile(ctx context.Context, name string) error {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(b.opts.pprofURL, "/"), profileSeconds)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: (profileSeconds + 30) * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("fetch: status %d: %s", resp.StatusCode, msg)
	}
	path := filepath.Join(b.opts.profileDir, "pgmirror-"+b.mode.name+"-"+name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b.logf("wrote %s", path)
	return nil
}
