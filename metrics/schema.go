package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// schemaChanges counts the schema changes applied on destinations; it is
// registered on first use.
var (
	schemaChangesOnce sync.Map // *Registry -> *prometheus.CounterVec
	schemaChangesMu   sync.Mutex
)

// SchemaChangeApplied counts one schema change statement applied on the
// destination of mirror (pgmirror_schema_changes_applied_total).
func (r *Registry) SchemaChangeApplied(mirror string) {
	if r == nil {
		return
	}
	schemaChangesMu.Lock()
	v, ok := schemaChangesOnce.Load(r)
	if !ok {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pgmirror_schema_changes_applied_total",
			Help: "Schema changes of source tables applied on the destination (one per statement executed), by mirror.",
		}, []string{"mirror"})
		r.reg.MustRegister(c)
		schemaChangesOnce.Store(r, c)
		v = c
	}
	schemaChangesMu.Unlock()
	v.(*prometheus.CounterVec).WithLabelValues(mirror).Inc()
}
