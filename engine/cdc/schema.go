package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
)

// SchemaChangeReporter may also be implemented by a Reporter to hear what
// the run does with source column changes under Config.SchemaChanges.
type SchemaChangeReporter interface {
	// SchemaChangeApplied is called with each statement applied to the
	// destination at the change's position, once its batch committed.
	SchemaChangeApplied(ctx context.Context, table change.TableName, statement string)
	// SchemaChangeWarned is called under warn with each change left alone.
	SchemaChangeWarned(ctx context.Context, table change.TableName, what string)
	// ResyncTable asks for a copy of table beside running CDC: a change
	// may have changed values the stream does not carry (reason). An
	// error fails the batch.
	ResyncTable(ctx context.Context, table change.TableName, reason string) error
}

// SchemaStopError is returned (wrapped) by Run under Config.SchemaChanges
// stop, before the first change that would alter the destination's schema,
// once everything before the source transaction that carries it is applied
// (At is that transaction's commit position).
type SchemaStopError = apply.SchemaStopError

// sourceCatalog reads the source's catalog for the applier on a connection
// of its own, opened on first use and closed again once it has been idle for
// sourceCatalogIdle (closeIdle, from the run's loop), so that a streaming
// mirror holds no source connection besides its walsender: the catalog is
// read when a table's shape changes, which is rare.
type sourceCatalog struct {
	cfg      *pgx.ConnConfig
	conn     *pgx.Conn
	lastUsed time.Time
}

// sourceCatalogIdle is how long the source catalog connection stays open
// unused.
const sourceCatalogIdle = 5 * time.Second

// closeIdle closes the connection when it has not been used for
// sourceCatalogIdle. It runs on the goroutine that applies (the run's loop),
// like every other use of the connection.
func (s *sourceCatalog) closeIdle(now time.Time) {
	if s != nil && s.conn != nil && now.Sub(s.lastUsed) >= sourceCatalogIdle {
		closeQuietly(s.conn)
		s.conn = nil
	}
}

func (s *sourceCatalog) connect(ctx context.Context) (*pgx.Conn, error) {
	s.lastUsed = time.Now()
	if s.conn != nil && !s.conn.IsClosed() {
		return s.conn, nil
	}
	conn, err := session.Connect(ctx, s.cfg)
	if err != nil {
		return nil, connectError("source", err)
	}
	s.conn = conn
	return conn, nil
}

func (s *sourceCatalog) close() {
	if s != nil && s.conn != nil {
		closeQuietly(s.conn)
	}
}

// sourceColumnsSQL reads every column with attnum > 0 of a table, dropped
// ones included, with format_type and expressions printed for another
// database (search_path pg_catalog: names outside it are qualified).
const sourceColumnsSQL = `SELECT a.attnum, a.attname::text, a.attisdropped, a.atttypid, a.atttypmod,
		CASE WHEN a.attisdropped THEN '' ELSE format_type(a.atttypid, a.atttypmod) END,
		a.attnotnull, CASE WHEN a.attgenerated = '' THEN coalesce(pg_get_expr(d.adbin, d.adrelid), '') ELSE '' END,
		CASE WHEN a.atthasmissing AND NOT a.attisdropped THEN (a.attmissingval::text::text[])[1] END,
		a.attgenerated <> '', a.attidentity <> '',
		CASE WHEN a.attgenerated = '' AND NOT a.attisdropped THEN coalesce(d.adbin::text, '') ELSE '' END
	FROM pg_attribute a
	LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE a.attrelid = (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2) AND a.attnum > 0
	ORDER BY a.attnum`

// Columns implements apply.SourceCatalog. A default whose expression
// may not be evaluated on the destination (exprcheck) has
// DefaultNotCarried set.
func (s *sourceCatalog) Columns(ctx context.Context, table change.TableName) ([]apply.SourceColumn, error) {
	var out []apply.SourceColumn
	err := s.catalogTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sourceColumnsSQL, table.Schema, table.Name)
		if err != nil {
			return err
		}
		var trees []string
		for rows.Next() {
			var c apply.SourceColumn
			var attnum int16
			var tree string
			if err := rows.Scan(&attnum, &c.Name, &c.Dropped, &c.TypeOID, &c.TypeMod, &c.Type, &c.NotNull, &c.Default, &c.Missing, &c.Generated, &c.Identity, &tree); err != nil {
				rows.Close()
				return err
			}
			c.Attnum = int(attnum)
			out = append(out, c)
			trees = append(trees, tree)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		check := exprcheck.New(tx)
		for i, tree := range trees {
			if out[i].Default == "" {
				continue
			}
			if out[i].DefaultNotCarried, err = check.Check(ctx, tree); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns of source table %s: %w", table, err)
	}
	return out, nil
}

// PrimaryKey implements apply.KeyCatalog: the columns of the source
// table's primary key in key order, none without one.
func (s *sourceCatalog) PrimaryKey(ctx context.Context, table change.TableName) ([]string, error) {
	var key []string
	err := s.catalogTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT a.attname::text
			FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
			WHERE i.indisprimary AND i.indrelid = (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
				WHERE n.nspname = $1 AND c.relname = $2)
			ORDER BY k.n`, table.Schema, table.Name)
		if err != nil {
			return err
		}
		key, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the primary key of source table %s: %w", table, err)
	}
	return key, nil
}

// FormatType implements apply.SourceCatalog.
func (s *sourceCatalog) FormatType(ctx context.Context, oid uint32, typmod int32) (string, error) {
	var typ *string
	err := s.catalogTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT format_type($1::oid, $2::int)`, oid, typmod).Scan(&typ)
	})
	if err != nil {
		return "", fmt.Errorf("read the name of source type %d: %w", oid, err)
	}
	if typ == nil || *typ == "???" {
		return "", fmt.Errorf("source type %d does not exist", oid)
	}
	return *typ, nil
}

// CheckExpressions checks node trees of source expressions with exprcheck
// on the source's catalog: "" when they may be evaluated on the
// destination, otherwise why not.
func (s *sourceCatalog) CheckExpressions(ctx context.Context, trees ...string) (string, error) {
	var reason string
	err := s.catalogTx(ctx, func(tx pgx.Tx) error {
		var err error
		reason, err = exprcheck.New(tx).Check(ctx, trees...)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("check source expressions: %w", err)
	}
	return reason, nil
}

// EnsureTypes implements apply.SourceCatalog.
func (s *sourceCatalog) EnsureTypes(ctx context.Context, dst *pgx.Conn, oids []uint32) (ddl, warnings []string, err error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	return schemasync.EnsureTypesIn(ctx, conn, dst, oids)
}

// catalogTx runs fn in a read-only transaction whose search_path is
// pg_catalog.
func (s *sourceCatalog) catalogTx(ctx context.Context, fn func(pgx.Tx) error) error {
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
		return err
	}
	return fn(tx)
}

// schemaConfig sets the applier's handling of source column changes from
// cfg and rep; it returns the source catalog reader it set (nil when none),
// which the run closes when it ends and, when idle, from its loop.
func schemaConfig(cfg Config, rep Reporter, applyCfg *apply.Config) *sourceCatalog {
	if cfg.SchemaChanges == "" {
		return nil
	}
	applyCfg.SchemaChanges = apply.SchemaMode(cfg.SchemaChanges)
	src := &sourceCatalog{cfg: cfg.Source}
	applyCfg.Source = src
	if sr, ok := rep.(SchemaChangeReporter); ok {
		applyCfg.SchemaHooks = apply.SchemaHooks{Applied: sr.SchemaChangeApplied, Warned: sr.SchemaChangeWarned, Resync: sr.ResyncTable}
	}
	if dr, ok := rep.(DDLReporter); ok {
		applyCfg.SchemaHooks.NotCarried = dr.SchemaChangeRejected
	}
	return src
}
