// Package metrics exposes pgmirror's Prometheus metrics on GET /metrics.
//
// Two kinds of series, so that several replicas scraped together never count
// anything twice:
//   - data-plane series (changes applied, batch sizes and durations,
//     failures and retries, snapshot progress) are counted in the process
//     that does the work: a mirror's series come from the replica that runs
//     it at the time (sum them across replicas);
//   - catalog series (each mirror's status, lag, slot health, River's jobs)
//     are read from the shared catalog at scrape time, by River's elected
//     leader only: exactly one replica reports them.
//
// A nil *Registry records nothing, so code that runs without metrics (tests,
// tools) needs no special case.
package metrics

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
)

// Catalog reads the catalog's part of the metrics (db.Store implements it).
type Catalog interface {
	CatalogMetrics(ctx context.Context, clientID string, now time.Time) (db.CatalogMetrics, error)
}

// Registry holds pgmirror's metrics.
type Registry struct {
	reg           *prometheus.Registry
	changes       *prometheus.CounterVec
	batchSeconds  *prometheus.HistogramVec
	batchChanges  *prometheus.HistogramVec
	errors        *prometheus.CounterVec
	retries       *prometheus.CounterVec
	snapCopied    *prometheus.GaugeVec
	snapEstimated *prometheus.GaugeVec
	schemaChanges *prometheus.CounterVec
	catalog       *catalogCollector
}

// New returns a registry with pgmirror's series and Go's runtime and process
// collectors. The catalog series are reported once SetCatalog is called.
func New() *Registry {
	r := &Registry{
		reg: prometheus.NewRegistry(),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmirror_changes_applied_total",
			Help: "Row changes (and truncates) applied on the destination by CDC, by mirror, source table and operation (insert, update, delete, truncate).",
		}, []string{"mirror", "table", "op"}),
		batchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgmirror_batch_apply_seconds",
			Help:    "Time from a CDC batch's first change to its commit on the destination.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"mirror"}),
		batchChanges: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "pgmirror_batch_changes",
			Help:    "Row changes per CDC batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1 .. 262144
		}, []string{"mirror"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmirror_mirror_errors_total",
			Help: "Failed runs of a mirror (each one sets the mirror to error and schedules a retry).",
		}, []string{"mirror"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmirror_mirror_retries_total",
			Help: "Runs of a mirror started after a failure (automatic retries after the backoff and POST retry).",
		}, []string{"mirror"}),
		snapCopied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgmirror_snapshot_rows_copied",
			Help: "Rows copied so far by the running snapshot (or table copy) of a table; the series goes away when the copy ends.",
		}, []string{"mirror", "table"}),
		snapEstimated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "pgmirror_snapshot_rows_estimated",
			Help: "The source's row estimate of a table being copied; the series goes away when the copy ends.",
		}, []string{"mirror", "table"}),
		schemaChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmirror_schema_changes_applied_total",
			Help: "Source schema changes applied to the destination by CDC at their position in the stream (each statement logged as Schema change applied).",
		}, []string{"mirror"}),
	}
	r.reg.MustRegister(r.changes, r.batchSeconds, r.batchChanges, r.errors, r.retries, r.snapCopied, r.snapEstimated, r.schemaChanges,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// SetCatalog makes this replica report the catalog series whenever the River
// client clientID is the leader. logger hears of failed catalog reads.
func (r *Registry) SetCatalog(c Catalog, clientID string, logger *slog.Logger) {
	if r == nil {
		return
	}
	r.catalog = newCatalogCollector(c, clientID, logger)
	r.reg.MustRegister(r.catalog)
}

// BatchApplied counts a CDC batch of mirror: its duration, its changes, and
// the changes per source table.
func (r *Registry) BatchApplied(mirror string, d time.Duration, changes int64, tables map[change.TableName]change.Counts) {
	if r == nil {
		return
	}
	r.batchSeconds.WithLabelValues(mirror).Observe(d.Seconds())
	r.batchChanges.WithLabelValues(mirror).Observe(float64(changes))
	for table, ops := range tables {
		for op, n := range map[string]int64{"insert": ops.Inserted, "update": ops.Updated, "delete": ops.Deleted, "truncate": ops.Truncated} {
			if n > 0 {
				r.changes.WithLabelValues(mirror, table.String(), op).Add(float64(n))
			}
		}
	}
}

// MirrorFailed counts a failed run of mirror.
func (r *Registry) MirrorFailed(mirror string) {
	if r != nil {
		r.errors.WithLabelValues(mirror).Inc()
	}
}

// SchemaChangeApplied counts a source schema change applied to mirror's
// destination.
func (r *Registry) SchemaChangeApplied(mirror string) {
	if r != nil {
		r.schemaChanges.WithLabelValues(mirror).Inc()
	}
}

// MirrorRetried counts a run of mirror started after a failure.
func (r *Registry) MirrorRetried(mirror string) {
	if r != nil {
		r.retries.WithLabelValues(mirror).Inc()
	}
}

// SnapshotProgress sets the rows copied so far and the source's estimate of
// a table being copied (estimated < 0: unknown).
func (r *Registry) SnapshotProgress(mirror, table string, copied, estimated int64) {
	if r == nil {
		return
	}
	r.snapCopied.WithLabelValues(mirror, table).Set(float64(copied))
	if estimated >= 0 {
		r.snapEstimated.WithLabelValues(mirror, table).Set(float64(estimated))
	}
}

// SnapshotEnded removes a table's snapshot series once its copy ended (done
// or abandoned).
func (r *Registry) SnapshotEnded(mirror, table string) {
	if r == nil {
		return
	}
	r.snapCopied.DeleteLabelValues(mirror, table)
	r.snapEstimated.DeleteLabelValues(mirror, table)
}

// Handler serves the metrics in the Prometheus text format. With a token,
// a request must send "Authorization: Bearer <token>" or gets a JSON 401;
// the scheme is matched in any case, as the API matches it.
func (r *Registry) Handler(token string) http.Handler {
	h := promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		scheme, got, ok := strings.Cut(req.Header.Get("Authorization"), " ")
		ok = ok && strings.EqualFold(scheme, "Bearer")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgmirror metrics"`)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"GET /metrics needs Authorization: Bearer <SERVICE_METRICS_TOKEN>"}` + "\n"))
			return
		}
		h.ServeHTTP(w, req)
	})
}
