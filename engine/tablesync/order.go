package tablesync

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// replicaRoleAllowed reports whether the destination user may set
// session_replication_role (superusers only), by setting it on dst, in one
// round trip: it stays set when keep is true, else it is reset. With it, the
// copy runs with foreign keys and ordinary triggers off, as PostgreSQL's own
// table sync does; the source already checked its constraints.
func replicaRoleAllowed(ctx context.Context, dst *pgx.Conn, keep bool) (bool, error) {
	sql := "SET session_replication_role = replica"
	if !keep {
		sql += "; RESET session_replication_role"
	}
	_, err := dst.Exec(ctx, sql)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return false, nil
	default:
		return false, fmt.Errorf("check session_replication_role on destination: %w", err)
	}
}

// fkEdge is one foreign key between two destination tables: child
// references parent.
type fkEdge struct{ child, parent change.TableName }

// foreignKeyWaves orders jobs for a destination whose foreign keys stay on,
// from the destination's foreign keys (see waves).
func foreignKeyWaves(ctx context.Context, dst *pgx.Conn, jobs []*tableJob) ([][]*tableJob, error) {
	edges, err := destinationForeignKeys(ctx, dst)
	if err != nil {
		return nil, err
	}
	return waves(jobs, edges), nil
}

// destinationForeignKeys reads every foreign key of the destination between
// two different tables.
func destinationForeignKeys(ctx context.Context, dst *pgx.Conn) ([]fkEdge, error) {
	rows, err := dst.Query(ctx, `
SELECT cn.nspname, c.relname, pn.nspname, p.relname
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace cn ON cn.oid = c.relnamespace
JOIN pg_catalog.pg_class p ON p.oid = k.confrelid
JOIN pg_catalog.pg_namespace pn ON pn.oid = p.relnamespace
WHERE k.contype = 'f' AND k.conrelid <> k.confrelid`)
	if err != nil {
		return nil, fmt.Errorf("read destination foreign keys: %w", err)
	}
	edges, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fkEdge, error) {
		var e fkEdge
		err := row.Scan(&e.child.Schema, &e.child.Name, &e.parent.Schema, &e.parent.Name)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read destination foreign keys: %w", err)
	}
	return edges, nil
}

// waves orders jobs so that a table whose destination references another
// table of the copy (an edge) comes in a later wave than that table, and
// every row finds its parent. Tables in one wave may be copied in parallel;
// within a wave, jobs keep their given order. A cycle of references puts
// the rest in one last wave (its copy may then fail on the foreign key, and
// the error says which). Edges to or from tables outside the copy do not
// matter.
func waves(jobs []*tableJob, edges []fkEdge) [][]*tableJob {
	byDest := map[change.TableName]*tableJob{}
	for _, j := range jobs {
		byDest[j.m.Destination] = j
	}
	parents := map[*tableJob][]*tableJob{}
	for _, e := range edges {
		c, p := byDest[e.child], byDest[e.parent]
		if c != nil && p != nil {
			parents[c] = append(parents[c], p)
		}
	}
	var waves [][]*tableJob
	done := map[*tableJob]bool{}
	for len(done) < len(jobs) {
		var wave []*tableJob
		for _, j := range jobs {
			if done[j] {
				continue
			}
			ready := true
			for _, p := range parents[j] {
				ready = ready && done[p]
			}
			if ready {
				wave = append(wave, j)
			}
		}
		if len(wave) == 0 { // a cycle: the rest together
			for _, j := range jobs {
				if !done[j] {
					wave = append(wave, j)
				}
			}
		}
		for _, j := range wave {
			done[j] = true
		}
		waves = append(waves, wave)
	}
	return waves
}
