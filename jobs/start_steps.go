package jobs

import (
	"context"
	"log/slog"
	"strings"
	"time"
)

// startSteps times the steps of a run's start (prepare, then the phase
// that leads to streaming), for the debug line "run start steps": where a
// run spends the time between taking the mirror and streaming.
type startSteps struct {
	began time.Time
	last  time.Time
	b     strings.Builder
}

func newStartSteps() *startSteps {
	now := time.Now()
	return &startSteps{began: now, last: now}
}

// done records that step ended now. A nil startSteps records nothing.
func (s *startSteps) done(step string) {
	if s == nil {
		return
	}
	now := time.Now()
	if s.b.Len() > 0 {
		s.b.WriteString(", ")
	}
	s.b.WriteString(step)
	s.b.WriteByte(' ')
	s.b.WriteString(now.Sub(s.last).Round(100 * time.Microsecond).String())
	s.last = now
}

// log writes the steps so far at debug level.
func (s *startSteps) log(ctx context.Context, logger *slog.Logger) {
	if s == nil || !logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	logger.DebugContext(ctx, "run start steps", "total", time.Since(s.began).Round(time.Millisecond).String(), "steps", s.b.String())
}
