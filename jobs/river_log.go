package jobs

import (
	"context"
	"log/slog"
)

// riverLogHandler lowers River's informational records to debug and passes
// its warnings and errors through as they are. River logs "Producer job
// counts" at info whenever a periodic job has run, which on an idle service
// is a line every few seconds that tells an operator nothing; with
// SERVICE_LOG_LEVEL=debug those lines are still there.
type riverLogHandler struct{ next slog.Handler }

func (h riverLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, lowered(level))
}

func (h riverLogHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lowered(r.Level)
	return h.next.Handle(ctx, r)
}

func (h riverLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return riverLogHandler{h.next.WithAttrs(attrs)}
}

func (h riverLogHandler) WithGroup(name string) slog.Handler {
	return riverLogHandler{h.next.WithGroup(name)}
}

func lowered(level slog.Level) slog.Level {
	if level >= slog.LevelDebug && level < slog.LevelWarn {
		return slog.LevelDebug
	}
	return level
}

// riverLogger is the logger handed to River: component=river, quieter.
func riverLogger(logger *slog.Logger) *slog.Logger {
	return slog.New(riverLogHandler{logger.With("component", "river").Handler()})
}
