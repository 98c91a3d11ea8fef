package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// TestCLIUnits is the table of how the CLI writes lags, durations, sizes,
// times and counts; the console writes them by the same rules
// (TestConsoleUnits reads them in the browser).
func TestCLIUnits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sec  float64
		want string
	}{
		{-1, "0.00 s"}, {math.NaN(), "0.00 s"}, {0, "0.00 s"}, {0.2, "0.20 s"}, {9.994, "9.99 s"}, {9.996, "10 s"},
		{10, "10 s"}, {45, "45 s"}, {59.4, "59 s"}, {59.6, "1 min"}, {60, "1 min"}, {61, "1 min 1 s"}, {192, "3 min 12 s"},
		{324.9, "5 min 25 s"}, {3599, "59 min 59 s"}, {3600, "1 h"}, {3660, "1 h 1 min"}, {10920, "3 h 2 min"},
		{10949, "3 h 2 min"}, {86399, "23 h 59 min"}, {86400, "1 d"}, {90061, "1 d 1 h"}, {30 * 86400, "30 d"},
	} {
		if got := formatSeconds(c.sec); got != c.want {
			t.Errorf("formatSeconds(%v) = %q, want %q", c.sec, got, c.want)
		}
	}
	lag := 10925.0
	if got := formatLag(&lag); got != "3 h 2 min" {
		t.Errorf("formatLag(%v) = %q", lag, got)
	}
	if got := formatLag(nil); got != "-" {
		t.Errorf("formatLag(nil) = %q", got)
	}
	for _, c := range []struct {
		ms   int64
		want string
	}{{0, "0 ms"}, {310, "310 ms"}, {999, "999 ms"}, {1000, "1.00 s"}, {12500, "13 s"}, {192000, "3 min 12 s"}} {
		if got := formatMillis(c.ms); got != c.want {
			t.Errorf("formatMillis(%d) = %q, want %q", c.ms, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int64
		want string
	}{
		{-5, "-5 B"}, {0, "0 B"}, {1, "1 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1638, "1.6 KiB"}, {1048575, "1.0 MiB"}, {1047552, "1023.0 KiB"},
		{5 << 20, "5.0 MiB"}, {3 << 30, "3.0 GiB"}, {1536 << 30, "1.5 TiB"}, {2048 << 40, "2048.0 TiB"},
	} {
		if got := formatBytes(&c.n); got != c.want {
			t.Errorf("formatBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	if got := formatBytes(nil); got != "-" {
		t.Errorf("formatBytes(nil) = %q", got)
	}
	at := time.Date(2026, 11, 27, 18, 52, 4, 0, time.UTC)
	for _, c := range []struct {
		loc  *time.Location
		want string
	}{
		{time.UTC, "2026-11-27 18:52:04 UTC"},
		{time.FixedZone("CET", 3600), "2026-11-27 19:52:04 UTC+01:00"},
		{time.FixedZone("EST", -5*3600), "2026-11-27 13:52:04 UTC-05:00"},
		{time.FixedZone("IST", 5*3600+1800), "2026-11-28 00:22:04 UTC+05:30"},
	} {
		if got := formatTimeIn(at, c.loc, "2006-01-02 15:04:05"); got != c.want {
			t.Errorf("formatTimeIn(%s) = %q, want %q", c.loc, got, c.want)
		}
	}
	if got := formatTime(nil); got != "-" {
		t.Errorf("formatTime(nil) = %q", got)
	}
	if got := formatTime(&time.Time{}); got != "-" {
		t.Errorf("formatTime(zero) = %q", got)
	}
	for _, c := range []struct {
		n         int64
		one, many string
		want      string
	}{{0, "table", "tables", "0 tables"}, {1, "table", "tables", "1 table"}, {2, "table", "tables", "2 tables"},
		{1, "entry", "entries", "1 entry"}, {21, "entry", "entries", "21 entries"}} {
		if got := plural(c.n, c.one, c.many); got != c.want {
			t.Errorf("plural(%d, %q, %q) = %q, want %q", c.n, c.one, c.many, got, c.want)
		}
	}
	if got := lostNote(&client.LostChanges{Tables: []string{"public.a"}}); got != " (changes lost: 1 table)" {
		t.Errorf("lostNote(1 table) = %q", got)
	}
	if got := lostNote(&client.LostChanges{Tables: []string{"public.a", "public.b"}}); got != " (changes lost: 2 tables)" {
		t.Errorf("lostNote(2 tables) = %q", got)
	}
}

// TestCLIDefaultPasswordWarning: a login with the default password "admin"
// warns on stderr; any other password does not.
func TestCLIDefaultPasswordWarning(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	warnDefaultPassword(&w, "admin")
	if !strings.Contains(w.String(), `still the default "admin"`) || !strings.Contains(w.String(), "Change password") {
		t.Errorf("login with the default password: %q", w.String())
	}
	w.Reset()
	warnDefaultPassword(&w, "something-else")
	if w.Len() != 0 {
		t.Errorf("login with another password warns: %q", w.String())
	}
}
