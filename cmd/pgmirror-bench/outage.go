package main

import (
	"context"
	"fmt"
	"time"
)

// scaleOutage is how long the catalog is unreachable in the outage step.
const scaleOutage = 30 * time.Second

// outageResult is what the catalog outage step measured.
type outageResult struct {
	equalAtEnd int           // tables with every row written during the outage on the destination when it ended
	apiBack    time.Duration // catalog back until GET /v1/mirrors answers
	highestLag float64       // the highest lag_seconds in that first answer
	allRunning time.Duration // catalog back until every mirror runs with a worker
	moved      int           // mirrors on another replica 15 s after the catalog came back
	equalAfter time.Duration // catalog back until every table is equal
}

// outageMirror is a mirror as the list shows it, with its lag.
type outageMirror struct {
	scaleMirror
	LagSeconds *float64 `json:"lag_seconds"`
}

// catalogOutage makes the catalog unreachable for scaleOutage: its database
// refuses new connections and its sessions are ended (ALLOW_CONNECTIONS
// false, pg_terminate_backend), while a round of writes goes every second.
// The streams go on without the catalog: it counts the tables that have
// every row written during the outage when it ends. After the catalog comes
// back: the time until the API answers, the highest lag it reports then
// (the streams' own, not the age of the last catalog write), the time until
// every mirror runs with a worker, how many mirrors changed replica (none
// should: the replicas were at their share) and the time until every
// table is equal.
func (s *scaleRun) catalogOutage(ctx context.Context) error {
	admin, err := connect(ctx, s.url(s.dst, "postgres"))
	if err != nil {
		return err
	}
	defer closeConn(admin)
	src, err := connect(ctx, s.url(s.src, scaleSrcDB))
	if err != nil {
		return err
	}
	defer closeConn(src)
	// Every mirror streams before the outage (the restarts before it may
	// still be handing mirrors over): a round written now reaches every
	// table. A run still starting when the catalog goes stops until it
	// comes back, which is not what this step measures.
	if err := s.writeRound(ctx, src, 999); err != nil {
		return err
	}
	if err := s.waitTablesEqual(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("before the catalog outage: %w", err)
	}
	before, err := mirrorWorkers(ctx, s.replicas[0].svc)
	if err != nil {
		return err
	}
	s.logf("catalog outage: the catalog database refuses connections for %s, under a round of writes a second", scaleOutage)
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+scaleCatalogDB+" ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("close the catalog: %w", err)
	}
	restore := func() error {
		_, err := admin.Exec(context.WithoutCancel(ctx), "ALTER DATABASE "+scaleCatalogDB+" ALLOW_CONNECTIONS true")
		return err
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, scaleCatalogDB); err != nil {
		_ = restore()
		return fmt.Errorf("end the catalog's sessions: %w", err)
	}
	began := time.Now()
	for round := 1; time.Since(began) < scaleOutage; round++ {
		if err := s.writeRound(ctx, src, 1000+round); err != nil {
			_ = restore()
			return err
		}
		if err := sleep(ctx, time.Second); err != nil {
			_ = restore()
			return err
		}
	}
	// The last round had a second to arrive.
	equal, err := s.tablesEqualNow(ctx)
	if err != nil {
		_ = restore()
		return err
	}
	s.res.outage.equalAtEnd = equal
	if err := restore(); err != nil {
		return fmt.Errorf("open the catalog again: %w", err)
	}
	back := time.Now()
	if err := s.afterOutage(ctx, back, before); err != nil {
		return err
	}
	o := s.res.outage
	s.logf("catalog outage: %d of %d tables had every row written during it when it ended; after it the API answered in %s "+
		"(highest lag %.2f s), every mirror ran with a worker after %s, every table was equal after %s; %d mirrors changed replica",
		o.equalAtEnd, s.opts.scaleMirrors, o.apiBack.Round(time.Millisecond), o.highestLag, o.allRunning.Round(time.Millisecond),
		o.equalAfter.Round(time.Millisecond), o.moved)
	return nil
}

// afterOutage measures the return of the catalog at back: the API's first
// answer and the highest lag in it, every mirror with a worker, every table
// equal, and the mirrors whose worker changed since before, 15 s after.
func (s *scaleRun) afterOutage(ctx context.Context, back time.Time, before map[string]string) error {
	for {
		var list []outageMirror
		if err := s.replicas[0].svc.call(ctx, "GET", "/v1/mirrors", nil, &list); err == nil {
			s.res.outage.apiBack = time.Since(back)
			for _, m := range list {
				if m.LagSeconds != nil {
					s.res.outage.highestLag = max(s.res.outage.highestLag, *m.LagSeconds)
				}
			}
			break
		}
		if time.Since(back) > 2*time.Minute {
			return fmt.Errorf("the API did not answer within 2 minutes of the catalog's return")
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	for {
		byWorker, running, err := listRunning(ctx, s.replicas[0].svc)
		if err == nil && running == s.opts.scaleMirrors && byWorker[""] == 0 {
			s.res.outage.allRunning = time.Since(back)
			break
		}
		if time.Since(back) > 2*time.Minute {
			return fmt.Errorf("not every mirror runs with a worker 2 minutes after the catalog's return")
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	if err := s.waitTablesEqual(ctx, 5*time.Minute); err != nil {
		return fmt.Errorf("after the catalog outage: %w", err)
	}
	s.res.outage.equalAfter = time.Since(back)
	if err := sleep(ctx, 15*time.Second-time.Since(back)); err != nil {
		return err
	}
	after, err := mirrorWorkers(ctx, s.replicas[0].svc)
	if err != nil {
		return err
	}
	for name, w := range before {
		if after[name] != w {
			s.res.outage.moved++
		}
	}
	return nil
}

// mirrorWorkers is each mirror's worker ("" without one), by name.
func mirrorWorkers(ctx context.Context, svc *service) (map[string]string, error) {
	var list []scaleMirror
	if err := svc.call(ctx, "GET", "/v1/mirrors", nil, &list); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(list))
	for _, m := range list {
		out[m.Name] = deref(m.Worker)
	}
	return out, nil
}

// tablesEqualNow counts the tables with the same count and md5 on both
// sides now.
func (s *scaleRun) tablesEqualNow(ctx context.Context) (int, error) {
	src, err := connect(ctx, s.url(s.src, scaleSrcDB))
	if err != nil {
		return 0, err
	}
	defer closeConn(src)
	dst, err := connect(ctx, s.url(s.dst, scaleDstDB))
	if err != nil {
		return 0, err
	}
	defer closeConn(dst)
	sql := s.digestsSQL()
	want, err := digests(ctx, src, sql)
	if err != nil {
		return 0, err
	}
	got, err := digests(ctx, dst, sql)
	if err != nil {
		return 0, err
	}
	n := 0
	for t, w := range want {
		if got[t] == w {
			n++
		}
	}
	return n, nil
}
