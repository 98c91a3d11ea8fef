package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// KeyCatalog is a SourceCatalog that also reads a source table's primary
// key in key order (followKey uses it for the order of a new destination
// key; without it the key columns are in column order).
type KeyCatalog interface {
	PrimaryKey(ctx context.Context, table change.TableName) ([]string, error)
}

// sameSet reports whether a and b hold the same names.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// createdComment starts the COMMENT that pgmirror puts on the destination
// tables it creates (engine/schemasync).
const createdComment = "Created by pgmirror"

// followKey makes the primary key of a destination table that pgmirror
// created the source's when the source changed its primary key (ALTER
// TABLE ... DROP CONSTRAINT ..._pkey, ADD PRIMARY KEY (...)): pgoutput
// flags the key columns of a table with the default replica identity, and
// a destination key that no longer matches would fold or upsert distinct
// source rows into one (a narrower key) or reject none of them wrongly (a
// wider one). Under SchemaApply the key is replaced at this position in the
// batch transaction; under SchemaStop the run stops before it; under
// SchemaWarn it is reported. It returns the destination table as it is
// then.
func (a *Applier) followKey(ctx context.Context, m *change.Mapping, rel *change.Relation, dest *destTable) (*destTable, error) {
	if a.cfg.SchemaChanges == "" || rel.ReplicaIdentity != change.IdentityDefault || len(dest.pk) == 0 {
		return dest, nil
	}
	var key []string
	same := true
	for _, c := range rel.Columns {
		if !c.Key {
			continue
		}
		if m.Excluded(c.Name) {
			return dest, nil
		}
		if _, ok := dest.columns[c.Name]; !ok {
			return dest, nil
		}
		key = append(key, c.Name)
		same = same && dest.pk[c.Name]
	}
	if len(key) == 0 || (same && len(key) == len(dest.pk)) {
		return dest, nil
	}
	if a.cfg.Early {
		return nil, fmt.Errorf("primary key of %s differs from the source's: %w", rel.Table, ErrNotEarly)
	}
	var comment string
	var constraint *string
	err := a.conn.QueryRow(ctx, `SELECT coalesce(obj_description(c.oid, 'pg_class'), ''),
			(SELECT x.conname FROM pg_constraint x WHERE x.conrelid = c.oid AND x.contype = 'p')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
		m.Destination.Schema, m.Destination.Name).Scan(&comment, &constraint)
	if errors.Is(err, pgx.ErrNoRows) {
		return dest, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the primary key of destination table %s: %w", m.Destination, err)
	}
	if !strings.HasPrefix(comment, createdComment) || constraint == nil {
		// A table that existed before the mirror is left as it is.
		return dest, nil
	}
	if kc, ok := a.cfg.Source.(KeyCatalog); ok {
		// The source's key order when it is the same set of columns (the
		// catalog may be ahead of the stream).
		order, err := kc.PrimaryKey(ctx, rel.Table)
		if err != nil {
			return nil, err
		}
		if sameSet(order, key) {
			key = order
		}
	}
	quoted := make([]string, len(key))
	for i, k := range key {
		quoted[i] = sqlquote.Ident(k)
	}
	what := fmt.Sprintf("primary key changed to (%s)", strings.Join(quoted, ", "))
	switch a.cfg.SchemaChanges {
	case SchemaStop:
		return nil, &SchemaStopError{Table: rel.Table, Changes: []string{what}}
	case SchemaApply:
	default:
		a.schemaDone = append(a.schemaDone, schemaReport{table: rel.Table, warning: what})
		return dest, nil
	}
	if err := a.flush(ctx); err != nil {
		return nil, err
	}
	if err := a.begin(ctx); err != nil {
		return nil, err
	}
	name := m.Destination.Quoted()
	for _, stmt := range []string{
		fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s", name, sqlquote.Ident(*constraint)),
		fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (%s)", name, strings.Join(quoted, ", ")),
	} {
		if err := a.execStep(ctx, rel.Table, colsync.Step{SQL: stmt}); err != nil {
			return nil, err
		}
	}
	delete(a.tables, m.Destination)
	return a.destTable(ctx, m.Destination)
}
