package main

import (
	"strings"
	"testing"
)

func TestCatalogPoolSize(t *testing.T) {
	for _, tc := range []struct {
		url     string
		parsed  int32
		workers int
		want    int32
		err     string
	}{
		{url: "postgres://u@h/db", parsed: 4, workers: 50, want: 20},
		{url: "postgres://u@h/db", parsed: 4, workers: 200, want: 30},
		{url: "postgres://u@h/db", parsed: 4, workers: 500, want: 60},
		{url: "postgres://u@h/db?pool_max_conns=9", parsed: 9, workers: 50, want: 9},
		{url: "host=h user=u pool_max_conns=30", parsed: 30, workers: 50, want: 30},
		{url: "postgres://u@h/db?pool_max_conns=8", parsed: 8, workers: 50,
			err: "SERVICE_DATABASE_URL sets pool_max_conns=8, too few catalog connections for SERVICE_MIRROR_WORKERS=50: raise pool_max_conns to at least 9"},
		{url: "host=h pool_max_conns=3", parsed: 3, workers: 1, err: "at least 5"},
	} {
		got, err := catalogPoolSize(tc.url, tc.parsed, tc.workers)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s, %d workers: error %v, want %q", tc.url, tc.workers, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s, %d workers: %d, %v; want %d", tc.url, tc.workers, got, err, tc.want)
		}
	}
}
