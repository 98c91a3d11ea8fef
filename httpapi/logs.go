package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/pgmirror/pgmirror/db"
)

type logsInput struct {
	Name   string      `path:"name" doc:"Mirror name."`
	Limit  int         `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Number of entries returned."`
	Offset int         `query:"offset" minimum:"0" default:"0" doc:"Number of entries skipped."`
	Search string      `query:"search" maxLength:"1000" doc:"Case-insensitive text searched in messages and details."`
	Level  db.LogLevel `query:"level" doc:"Only entries of this level."`
}

type logEntry struct {
	ID        int64           `json:"id"`
	Level     db.LogLevel     `json:"level"`
	Message   string          `json:"message"`
	Details   json.RawMessage `json:"details" doc:"Structured data that depends on the entry's type."`
	CreatedAt time.Time       `json:"created_at"`
}

type logsOutput struct {
	Body struct {
		Logs   []logEntry `json:"logs" doc:"Newest first."`
		Total  int64      `json:"total" doc:"Entries matching the filter."`
		Offset int        `json:"offset"`
		Limit  int        `json:"limit"`
	}
}

func (h *handlers) registerLogs(api huma.API) {
	register(api, authed, huma.Operation{
		OperationID: "mirror-logs", Method: http.MethodGet, Path: "/v1/mirrors/{name}/logs", Tags: []string{"Logs"},
		Summary:     "Mirror logs",
		Description: "Structured log entries of a mirror, newest first. Page by increasing offset until it reaches total. Filters combine.",
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.logs)
}

func (h *handlers) logs(ctx context.Context, in *logsInput) (*logsOutput, error) {
	m, err := h.mirror(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	entries, total, err := h.store.LogList(ctx, db.LogQuery{MirrorID: m.ID, Level: in.Level, Search: in.Search, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, h.internal(ctx, "read the mirror's logs", err)
	}
	out := &logsOutput{}
	out.Body.Logs = make([]logEntry, 0, len(entries))
	for _, e := range entries {
		out.Body.Logs = append(out.Body.Logs, logEntry{ID: e.ID, Level: e.Level, Message: e.Message, Details: e.Details, CreatedAt: e.CreatedAt})
	}
	out.Body.Total, out.Body.Offset, out.Body.Limit = total, in.Offset, in.Limit
	return out, nil
}
