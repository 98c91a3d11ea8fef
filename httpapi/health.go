package httpapi

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
)

type healthOutput struct {
	Body struct {
		Status string `json:"status" example:"ok" doc:"Always ok while the HTTP server answers."`
	}
}

func (h *handlers) registerHealth(api huma.API) {
	register(api, open, huma.Operation{
		OperationID: "health", Method: http.MethodGet, Path: "/health", Tags: []string{"Health"},
		Summary:     "Health check",
		Description: "Answers ok while the HTTP server runs. It checks nothing else (not the catalog, peers or workers).",
	}, func(context.Context, *struct{}) (*healthOutput, error) {
		out := &healthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})
}
