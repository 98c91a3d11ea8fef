package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/riverqueue/river"
)

// readyTimeout bounds the checks of GET /ready.
const readyTimeout = 5 * time.Second

type readyOutput struct {
	Body struct {
		Status string `json:"status" example:"ready" doc:"Always ready when the status is 200."`
	}
}

func (h *handlers) registerReady(api huma.API) {
	register(api, open, huma.Operation{
		OperationID: "ready", Method: http.MethodGet, Path: "/ready", Tags: []string{"Health"},
		Summary: "Readiness check",
		Description: "200 when the catalog database answers and the job queue (River's tables in the catalog) is usable; " +
			"503 with Retry-After otherwise. Unlike /health, use it to route traffic and to wait for a catalog outage to end.",
	}, h.ready)
}

func (h *handlers) ready(ctx context.Context, _ *struct{}) (*readyOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		return nil, notReady("the catalog database does not answer")
	}
	if _, err := h.river.JobList(ctx, river.NewJobListParams().First(1)); err != nil {
		return nil, notReady("the job queue is not usable (River's tables in the catalog cannot be read)")
	}
	out := &readyOutput{}
	out.Body.Status = "ready"
	return out, nil
}

// notReady is the 503 of GET /ready; the cause is not logged (probes call
// it often) and internal error text is never shown.
func notReady(why string) error {
	return &apiError{status: http.StatusServiceUnavailable, headers: http.Header{"Retry-After": {retryAfter}},
		Message: "Not ready: " + why + "; retry in " + retryAfter + " seconds"}
}
