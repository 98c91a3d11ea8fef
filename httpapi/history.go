package httpapi

import (
	"context"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/pgmirror/pgmirror/jobs"
)

// historyDefault is how far back GET /v1/mirrors/{name}/history goes
// without since.
const historyDefault = 3 * time.Hour

// historyMaxSamples is the most samples one answer holds (the newest ones):
// a day of samples every 30 s is 2,880.
const historyMaxSamples = 10000

type historyInput struct {
	Name  string `path:"name" doc:"Mirror name."`
	Since string `query:"since" maxLength:"64" doc:"Samples taken after this time: an RFC 3339 time (2026-01-02T15:04:05Z) or a duration back from now (90m, 6h, 1d). Default 3h. At most the newest 10,000 samples are returned."`
}

type historySample struct {
	At                time.Time `json:"at" doc:"When the sample was taken (the catalog's clock)."`
	LagSeconds        *float64  `json:"lag_seconds" doc:"The streaming worker's lag measure at the sample: seconds since the source commit of the oldest change not yet applied; 0 when caught up."`
	RowsSynced        int64     `json:"rows_synced" doc:"Sum of the tables' rows_synced at the sample (rows copied plus row changes applied)."`
	RowsPerSecond     *float64  `json:"rows_per_second" doc:"rows_synced gained since the previous sample, per second; null for a first sample, after a gap of more than 2 minutes, or when the counters went back (a resync)."`
	LSN               *string   `json:"lsn" doc:"The mirror's last replicated LSN at the sample."`
	WALBytesPerSecond *float64  `json:"wal_bytes_per_second" doc:"Source WAL the mirror moved through since the previous sample, per second; null as rows_per_second."`
}

type historyOutput struct {
	Body struct {
		Mirror          string          `json:"mirror"`
		Since           time.Time       `json:"since" doc:"The start of the period returned."`
		IntervalSeconds int             `json:"interval_seconds" doc:"How often a streaming mirror gets a sample."`
		Samples         []historySample `json:"samples" doc:"Oldest first. Only while the mirror streams (running): a paused, failed or snapshotting mirror has a gap."`
	}
}

func (h *handlers) registerHistory(api huma.API) {
	register(api, authed, huma.Operation{
		OperationID: "mirror-history", Method: http.MethodGet, Path: "/v1/mirrors/{name}/history", Tags: []string{"Mirrors"},
		Summary: "Mirror lag and throughput history",
		Description: "Samples of the mirror's lag and throughput taken by the service every 30 s while the mirror streams, " +
			"kept for SERVICE_METRICS_HISTORY_RETENTION (24 h by default), oldest first.",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.history)
}

// parseSince reads the since parameter of the history: an RFC 3339 time or
// a duration back from now ("d" for days is allowed), default
// historyDefault.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now.Add(-historyDefault), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		if d, err = time.ParseDuration(days + "h"); err == nil {
			d *= 24
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, errorf(http.StatusBadRequest,
			"Invalid request: since %q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration back from now (90m, 6h, 1d)", s)
	}
	return now.Add(-d), nil
}

func (h *handlers) history(ctx context.Context, in *historyInput) (*historyOutput, error) {
	since, err := parseSince(in.Since, time.Now())
	if err != nil {
		return nil, err
	}
	m, err := h.mirror(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	samples, err := h.store.MirrorHistory(ctx, m.ID, since, historyMaxSamples)
	if err != nil {
		return nil, h.internal(ctx, "read the mirror's history", err)
	}
	out := &historyOutput{}
	out.Body.Mirror, out.Body.Since = m.Name, since
	out.Body.IntervalSeconds = int(jobs.HistoryInterval / time.Second)
	out.Body.Samples = make([]historySample, len(samples))
	for i, s := range samples {
		out.Body.Samples[i] = historySample{At: s.At, LagSeconds: round3(s.LagSeconds), RowsSynced: s.RowsSynced,
			RowsPerSecond: round3(s.RowsPerSecond), LSN: s.LSN, WALBytesPerSecond: round3(s.WALBytesPerSecond)}
	}
	return out, nil
}

// round3 rounds v to 3 decimals (nil stays nil).
func round3(v *float64) *float64 {
	if v == nil {
		return nil
	}
	r := math.Round(*v*1000) / 1000
	return &r
}
