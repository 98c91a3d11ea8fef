package metrics

import (
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
)

// riverOutcomes are the job events counted by WatchRiver.
var riverOutcomes = []river.EventKind{
	river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed,
}

// WatchRiver counts the outcomes of the jobs this replica's River client
// works (pgmirror_river_job_outcomes_total{kind, outcome}) until the client
// stops. Call it before the client starts.
func (r *Registry) WatchRiver(client *river.Client[pgx.Tx]) {
	if r == nil {
		return
	}
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pgmirror_river_job_outcomes_total",
		Help: "Jobs worked by this replica, by kind and outcome (job_completed, job_failed, job_cancelled, job_snoozed).",
	}, []string{"kind", "outcome"})
	r.reg.MustRegister(outcomes)
	events, cancel := client.Subscribe(riverOutcomes...)
	go func() {
		defer cancel()
		for ev := range events {
			if ev.Job != nil {
				outcomes.WithLabelValues(ev.Job.Kind, string(ev.Kind)).Inc()
			}
		}
	}()
}
