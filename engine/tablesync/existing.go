package tablesync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// ExistingRows is what Run does with the rows a destination table holds
// before its copy (Config.Existing).
type ExistingRows int

const (
	// TruncateRows empties the table first (the default: a resync, or a
	// restarted copy of rows Run wrote itself).
	TruncateRows ExistingRows = iota
	// RefuseRows copies into the table only when it is empty: Run returns
	// an *ExistingRowsError, before any table is truncated or copied, when
	// it has rows.
	RefuseRows
	// KeepRows leaves the rows where they are and copies the source's rows
	// over them: each partition goes into a temporary staging table and
	// then into the table with INSERT ... ON CONFLICT (primary key) DO
	// UPDATE. Rows the source does not have stay. A table with rows but no
	// primary key gives a *NoPrimaryKeyError; an empty table is copied
	// straight in.
	KeepRows
)

// ExistingRowsError is Run's answer when destination tables it may not
// empty (RefuseRows) hold rows.
type ExistingRowsError struct {
	// Tables are the destination tables that hold rows.
	Tables []change.TableName
}

func (e *ExistingRowsError) Error() string {
	return fmt.Sprintf("destination %s already %s rows that this mirror did not copy: they are left as they are and nothing is copied",
		tablesPhrase(e.Tables), holdVerb(len(e.Tables)))
}

// NoPrimaryKeyError is Run's answer when destination tables whose rows are
// to be kept (KeepRows) hold rows but have no primary key to match the
// source's rows with.
type NoPrimaryKeyError struct {
	// Tables are the destination tables without a primary key.
	Tables []change.TableName
}

func (e *NoPrimaryKeyError) Error() string {
	return fmt.Sprintf("destination %s %s rows but no primary key: rows can only be kept and updated from the source by primary key",
		tablesPhrase(e.Tables), holdVerb(len(e.Tables)))
}

func tablesPhrase(tables []change.TableName) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.String()
	}
	if len(names) == 1 {
		return "table " + names[0]
	}
	return "tables " + strings.Join(names, ", ")
}

func holdVerb(n int) string {
	if n == 1 {
		return "holds"
	}
	return "hold"
}

// Querier runs a query returning one row: a *pgx.Conn or a pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// HasRows reports whether table exists on q's database and holds at least
// one row (a missing table or schema has none).
func HasRows(ctx context.Context, q Querier, table change.TableName) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL`, table.Quoted()).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up destination table %s: %w", table, err)
	}
	if !exists {
		return false, nil
	}
	var rows bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+table.Quoted()+`)`).Scan(&rows); err != nil {
		return false, fmt.Errorf("check destination table %s for rows: %w", table, err)
	}
	return rows, nil
}

// PrimaryKey returns the columns of table's primary key on q's database, in
// key order; nil when it has none or does not exist.
func PrimaryKey(ctx context.Context, q Querier, table change.TableName) ([]string, error) {
	var cols []string
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(a.attname ORDER BY k.n), '{}')
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = to_regclass($1) AND i.indisprimary`, table.Quoted()).Scan(&cols)
	if err != nil {
		return nil, fmt.Errorf("read the primary key of destination table %s: %w", table, err)
	}
	if len(cols) == 0 {
		return nil, nil
	}
	return cols, nil
}

// prepareDestination checks and empties the destination tables of jobs in
// one transaction on w's destination connection, as Config.Existing says:
// it truncates the TruncateRows tables, refuses RefuseRows tables with
// rows, and sets the upsert key of KeepRows tables with rows. Nothing is
// truncated when a table is refused. With Config.SourceColumnsMirrorUID
// the same transaction records the tables' source columns.
func (r *run) prepareDestination(ctx context.Context, w *worker, jobs []*tableJob) error {
	if r.cfg.SourceColumnsMirrorUID != "" {
		if err := positions.Ensure(ctx, w.dst); err != nil {
			return err
		}
	}
	tx, err := w.dst.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin destination transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	if w.borrowed {                               // not under the caller's statement_timeout
		if _, err := tx.Exec(ctx, strings.TrimPrefix(setLocal(r.dstSettings), "; ")); err != nil {
			return fmt.Errorf("set up destination transaction: %w", err)
		}
	}
	var truncate []string
	var refused, noKey []change.TableName
	for _, j := range jobs {
		mode := r.cfg.Existing[j.m.Destination]
		if mode == TruncateRows {
			truncate = append(truncate, j.m.Destination.Quoted())
			continue
		}
		rows, err := HasRows(ctx, tx, j.m.Destination)
		if err != nil || !rows {
			if err != nil {
				return err
			}
			continue
		}
		if mode == RefuseRows {
			refused = append(refused, j.m.Destination)
			continue
		}
		if j.upsertKey, err = PrimaryKey(ctx, tx, j.m.Destination); err != nil {
			return err
		}
		if j.upsertKey == nil || !keyCopied(j.upsertKey, j.columns) {
			noKey = append(noKey, j.m.Destination)
		}
	}
	switch {
	case len(refused) > 0:
		return &ExistingRowsError{Tables: refused}
	case len(noKey) > 0:
		return &NoPrimaryKeyError{Tables: noKey}
	}
	if len(truncate) > 0 {
		replica := r.dstSettings["session_replication_role"] == "replica"
		for _, j := range jobs {
			if r.cfg.Existing[j.m.Destination] == TruncateRows && j.foreignOwner != "" {
				if err := exprcheck.GuardWrites(ctx, tx, j.m.Destination.Quoted(), j.foreignOwner, replica); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, "TRUNCATE TABLE "+strings.Join(truncate, ", ")); err != nil {
			return fmt.Errorf("truncate destination tables: %w", err)
		}
	}
	if uid := r.cfg.SourceColumnsMirrorUID; uid != "" {
		for _, j := range jobs {
			if err := positions.SetSourceColumns(ctx, tx, uid, j.m.Source, j.sourceColumns); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit destination checks: %w", err)
	}
	for _, j := range jobs {
		if j.upsertKey != nil {
			r.log.InfoContext(ctx, "destination table has rows: copying with upserts by primary key", "table", j.m.Destination.String(),
				"key", j.upsertKey)
		}
	}
	return nil
}

// keyCopied reports whether every key column is among the copied columns.
func keyCopied(key, columns []string) bool {
	for _, k := range key {
		if !slices.Contains(columns, k) {
			return false
		}
	}
	return true
}

// stagingTable is the temporary table a partition of a KeepRows table is
// copied into before it is upserted; dropped at the commit.
const stagingTable = "pg_temp.pgmirror_staging"

// upsertSQL returns the statements that create the staging table of a
// KeepRows partition, copy into it, and move its rows into the destination
// table.
func (j *tableJob) upsertSQL() (create, copyIn, upsert string) {
	cols := sqlquote.Idents(j.columns)
	dest := j.m.Destination.Quoted()
	create = fmt.Sprintf("CREATE TEMPORARY TABLE pgmirror_staging ON COMMIT DROP AS SELECT %s FROM %s WITH NO DATA", cols, dest)
	copyIn = fmt.Sprintf("COPY %s (%s) FROM STDIN", stagingTable, cols)
	if j.binary {
		copyIn += " (FORMAT binary)"
	}
	key := map[string]bool{}
	for _, k := range j.upsertKey {
		key[k] = true
	}
	var set []string
	for _, c := range j.columns {
		if !key[c] {
			q := sqlquote.Ident(c)
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	action := "DO NOTHING"
	if len(set) > 0 {
		action = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	upsert = fmt.Sprintf("INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE SELECT %s FROM %s ON CONFLICT (%s) %s",
		dest, cols, cols, stagingTable, sqlquote.Idents(j.upsertKey), action)
	return create, copyIn, upsert
}
