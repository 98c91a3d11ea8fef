package metrics

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgmirror/pgmirror/db"
)

// catalogReadTimeout bounds the catalog queries of one scrape.
const catalogReadTimeout = 5 * time.Second

// The statuses and WAL statuses reported as labels, so that every mirror has
// a series for each (1 for its current one, 0 for the others).
var (
	walStatuses = []string{"reserved", "extended", "unreserved", "lost", "missing"}
)

// catalogCollector reads the catalog series at scrape time, on River's
// leader only (see the package documentation).
type catalogCollector struct {
	catalog  Catalog
	clientID string
	logger   *slog.Logger

	status, lag, slotLag, walStatus, jobs, leader, up, worker, replicas *prometheus.Desc
	verifyDiffering, verifiedLSN, verifiedAt                            *prometheus.Desc
	lostTables                                                          *prometheus.Desc
}

func newCatalogCollector(c Catalog, clientID string, logger *slog.Logger) *catalogCollector {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &catalogCollector{
		catalog: c, clientID: clientID, logger: logger,
		status: prometheus.NewDesc("pgmirror_mirror_status",
			"1 for the mirror's current status, 0 for the others (reported by River's leader replica).", []string{"mirror", "status"}, nil),
		lag: prometheus.NewDesc("pgmirror_mirror_lag_seconds",
			"Seconds since the source commit of the oldest change the mirror has not applied; 0 when caught up (docs/observability.md).", []string{"mirror"}, nil),
		slotLag: prometheus.NewDesc("pgmirror_mirror_slot_lag_bytes",
			"WAL bytes the source keeps for the mirror's slot, as last read by the slot monitor.", []string{"mirror"}, nil),
		walStatus: prometheus.NewDesc("pgmirror_mirror_slot_wal_status",
			"1 for the slot's current wal_status (missing: no slot), 0 for the others.", []string{"mirror", "wal_status"}, nil),
		jobs: prometheus.NewDesc("pgmirror_river_jobs",
			"River jobs in the catalog by kind and state (available and scheduled ones make the queue depth).", []string{"kind", "state"}, nil),
		leader: prometheus.NewDesc("pgmirror_catalog_reporter",
			"1 on the replica that reports the catalog series (River's leader), 0 on the others.", nil, nil),
		worker: prometheus.NewDesc("pgmirror_mirror_worker",
			"1 while a replica runs the mirror (holds its lock), 0 while none does (docs/status.md).", []string{"mirror"}, nil),
		replicas: prometheus.NewDesc("pgmirror_replicas",
			"pgmirror replicas that reported to the catalog within the last 20 s.", nil, nil),
		up: prometheus.NewDesc("pgmirror_catalog_up",
			"1 when the last scrape could read the catalog, 0 when it could not.", nil, nil),
		verifyDiffering: prometheus.NewDesc("pgmirror_mirror_verify_rows_differing",
			"Rows that differed between source and destination in the mirror's latest completed verification.", []string{"mirror"}, nil),
		verifiedLSN: prometheus.NewDesc("pgmirror_mirror_verified_lsn_bytes",
			"The source position (bytes since 0/0) the latest completed verification compared at.", []string{"mirror"}, nil),
		verifiedAt: prometheus.NewDesc("pgmirror_mirror_verified_timestamp_seconds",
			"When the mirror's latest completed verification ended (Unix time).", []string{"mirror"}, nil),
		lostTables: prometheus.NewDesc("pgmirror_mirror_tables_lost_changes",
			"Tables of the mirror that may miss changes because its replication slot was missing, recreated, invalidated or moved on; 0 when the mirror is not known to have lost any (docs/status.md, Lost changes).", []string{"mirror"}, nil),
	}
}

func (c *catalogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.status, c.lag, c.slotLag, c.walStatus, c.jobs, c.leader, c.up, c.worker, c.replicas,
		c.verifyDiffering, c.verifiedLSN, c.verifiedAt, c.lostTables} {
		ch <- d
	}
}

func (c *catalogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), catalogReadTimeout)
	defer cancel()
	m, err := c.catalog.CatalogMetrics(ctx, c.clientID, time.Now())
	if err != nil {
		c.logger.Warn("metrics: cannot read the catalog", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, boolValue(m.Leader))
	if !m.Leader {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.replicas, prometheus.GaugeValue, float64(m.Replicas))
	for _, mh := range m.Mirrors {
		ch <- prometheus.MustNewConstMetric(c.worker, prometheus.GaugeValue, boolValue(mh.HasWorker), mh.Name)
		ch <- prometheus.MustNewConstMetric(c.lostTables, prometheus.GaugeValue, float64(mh.LostTables), mh.Name)
		for _, s := range db.MirrorStatuses {
			ch <- prometheus.MustNewConstMetric(c.status, prometheus.GaugeValue, boolValue(mh.Status == s), mh.Name, string(s))
		}
		if mh.LagSeconds != nil {
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, *mh.LagSeconds, mh.Name)
		}
		if mh.SlotLagBytes != nil {
			ch <- prometheus.MustNewConstMetric(c.slotLag, prometheus.GaugeValue, float64(*mh.SlotLagBytes), mh.Name)
		}
		if mh.VerifyRowsDiffering != nil {
			ch <- prometheus.MustNewConstMetric(c.verifyDiffering, prometheus.GaugeValue, float64(*mh.VerifyRowsDiffering), mh.Name)
			ch <- prometheus.MustNewConstMetric(c.verifiedLSN, prometheus.GaugeValue, *mh.VerifiedLSNBytes, mh.Name)
			if mh.VerifiedAt != nil {
				ch <- prometheus.MustNewConstMetric(c.verifiedAt, prometheus.GaugeValue, float64(mh.VerifiedAt.UnixNano())/1e9, mh.Name)
			}
		}
		if mh.SlotWALStatus != nil {
			for _, s := range walStatuses {
				ch <- prometheus.MustNewConstMetric(c.walStatus, prometheus.GaugeValue, boolValue(*mh.SlotWALStatus == s), mh.Name, s)
			}
		}
	}
	for _, j := range m.Jobs {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(j.Count), j.Kind, j.State)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
