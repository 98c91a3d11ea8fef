package db

import (
	"context"
	"fmt"
	"time"
)

// MirrorHealth is what the metrics endpoint reports of one live mirror from
// the catalog.
type MirrorHealth struct {
	Name          string
	Status        MirrorStatus
	SlotLagBytes  *int64
	SlotWALStatus *string
	// LagSeconds is the mirror's lag as the catalog knows it (see
	// Mirror.LagShown); nil when unknown.
	LagSeconds *float64
	// HasWorker says whether a replica runs the mirror now.
	HasWorker bool
	// The latest verification that ended done (nil before any): rows that
	// differed, the source position (bytes since 0/0) and when it ended.
	VerifyRowsDiffering *int64
	VerifiedLSNBytes    *float64
	VerifiedAt          *time.Time
	// LostTables counts the mirror's tables marked as possibly missing
	// changes (Mirror.LostChanges).
	LostTables int
}

// JobCount is the number of River jobs of one kind in one state.
type JobCount struct {
	Kind, State string
	Count       int64
}

// CatalogMetrics is the catalog's part of the metrics: the mirrors' status
// and slot health and River's jobs by kind and state. Leader says whether
// clientID is River's elected leader; only the leader reports these series,
// so that several replicas scraped together do not count them twice.
type CatalogMetrics struct {
	Leader  bool
	Mirrors []MirrorHealth
	Jobs    []JobCount
	// Replicas is the number of live replicas (LiveReplicas).
	Replicas int
}

// CatalogMetrics reads the catalog's part of the metrics when clientID (a
// River client id) is River's leader; otherwise it returns Leader false and
// reads nothing else.
func (s *Store) CatalogMetrics(ctx context.Context, clientID string, now time.Time) (CatalogMetrics, error) {
	var out CatalogMetrics
	if err := s.q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_leader WHERE leader_id = $1 AND expires_at > now())`,
		clientID).Scan(&out.Leader); err != nil {
		return out, fmt.Errorf("read River leader: %w", translate(err))
	}
	if !out.Leader {
		return out, nil
	}
	workers, err := s.MirrorWorkers(ctx)
	if err != nil {
		return out, err
	}
	replicas, err := s.LiveReplicas(ctx)
	if err != nil {
		return out, err
	}
	out.Replicas = len(replicas)
	rows, err := s.q.Query(ctx, `SELECT `+mirrorColumns+mirrorFrom+` WHERE m.deleted_at IS NULL ORDER BY m.name`)
	if err != nil {
		return out, fmt.Errorf("read mirrors for metrics: %w", translate(err))
	}
	for rows.Next() {
		m, err := scanMirror(rows)
		if err != nil {
			rows.Close()
			return out, fmt.Errorf("read mirrors for metrics: %w", translate(err))
		}
		var worker *MirrorWorker
		w, hasWorker := workers[m.ID]
		if hasWorker {
			worker = &w
		}
		lag := m.LagShown(worker, false, now)
		out.Mirrors = append(out.Mirrors, MirrorHealth{Name: m.Name, Status: m.Status, SlotLagBytes: m.SlotLagBytes,
			SlotWALStatus: m.SlotWALStatus, LagSeconds: lag, HasWorker: hasWorker, LostTables: len(m.LostChanges)})
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("read mirrors for metrics: %w", translate(err))
	}
	if err := s.verificationMetrics(ctx, out.Mirrors); err != nil {
		return out, err
	}
	rows, err = s.q.Query(ctx, `SELECT kind, state::text, count(*) FROM river_job GROUP BY kind, state ORDER BY 1, 2`)
	if err != nil {
		return out, fmt.Errorf("read River jobs for metrics: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var j JobCount
		if err := rows.Scan(&j.Kind, &j.State, &j.Count); err != nil {
			return out, fmt.Errorf("read River jobs for metrics: %w", translate(err))
		}
		out.Jobs = append(out.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("read River jobs for metrics: %w", translate(err))
	}
	return out, nil
}

// verificationMetrics fills in the mirrors' latest done verification.
func (s *Store) verificationMetrics(ctx context.Context, mirrors []MirrorHealth) error {
	rows, err := s.q.Query(ctx, `SELECT DISTINCT ON (v.mirror_id) m.name, coalesce(v.rows_differing, 0), (v.lsn - '0/0'::pg_lsn)::float8, v.finished_at
		FROM verifications v JOIN mirrors m ON m.id = v.mirror_id
		WHERE v.state = 'done' AND m.deleted_at IS NULL AND v.lsn IS NOT NULL ORDER BY v.mirror_id, v.id DESC`)
	if err != nil {
		return fmt.Errorf("read verifications for metrics: %w", translate(err))
	}
	defer rows.Close()
	byName := map[string]*MirrorHealth{}
	for i := range mirrors {
		byName[mirrors[i].Name] = &mirrors[i]
	}
	for rows.Next() {
		var name string
		var differing int64
		var lsn float64
		var at *time.Time
		if err := rows.Scan(&name, &differing, &lsn, &at); err != nil {
			return fmt.Errorf("read verifications for metrics: %w", translate(err))
		}
		if mh := byName[name]; mh != nil {
			mh.VerifyRowsDiffering, mh.VerifiedLSNBytes, mh.VerifiedAt = &differing, &lsn, at
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read verifications for metrics: %w", translate(err))
	}
	return nil
}
