package jobs

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// At the default level, River's routine info lines are gone and its
// warnings stay; at debug, both are there.
func TestRiverLogger(t *testing.T) {
	for _, tc := range []struct {
		level    slog.Level
		wantInfo bool
	}{{slog.LevelInfo, false}, {slog.LevelDebug, true}} {
		var out bytes.Buffer
		logger := riverLogger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: tc.level})))
		logger.Info("producer: Producer job counts", "num_completed_jobs", 3)
		logger.Warn("jobexecutor: job errored")
		got := out.String()
		if strings.Contains(got, "Producer job counts") != tc.wantInfo {
			t.Errorf("level %s: info line present = %v, want %v:\n%s", tc.level, !tc.wantInfo, tc.wantInfo, got)
		}
		if tc.wantInfo && !strings.Contains(got, "level=DEBUG") {
			t.Errorf("level %s: River's info line should be logged as debug:\n%s", tc.level, got)
		}
		if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "component=river") {
			t.Errorf("level %s: River's warning missing or not marked component=river:\n%s", tc.level, got)
		}
	}
}
