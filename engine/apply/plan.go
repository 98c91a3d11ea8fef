package apply

import (
	"context"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// This file holds what the applier knows of each table: the destination
// table's columns and key (destTable), and how changes of one version of a
// source relation are applied (plan, planFor), including the handling of
// source DDL mid-stream (new columns, dropped columns).

// destTable is what the applier knows of a destination table.
type destTable struct {
	name        change.TableName
	columns     map[string]destColumn
	pk          map[string]bool
	required    map[string]bool // NOT NULL without a default nor identity, outside the key: colsync.Relax
	partitioned bool
	// otherUnique: the table (or a partition of it) has a unique index
	// besides its primary key, or an exclusion constraint. Folding a chunk
	// to the final state of each key can then meet a row that still holds
	// a value another row takes over: a violation is an
	// OrderConflictError.
	otherUnique bool
	// foreignOwner names the table's owner when it is neither the
	// session's role nor a superuser, or else such a role that owns a
	// domain or composite type of its columns: writes are guarded
	// (guardWrites).
	foreignOwner string
	// guarded: guardWrites passed in the open batch transaction (the
	// applier forgets its tables with every batch).
	guarded bool
}

// destColumn is a column of a destination table.
type destColumn struct {
	typ     string // SQL type (format_type)
	typeOID uint32
	// stage is the column's definition in a staging table: its type (the
	// base type of a domain, whose constraints the staged NULLs of deletes
	// and unchanged values would break), with its collation, so that staged
	// keys compare with the column as its index does.
	stage string
	// hasDefault: the column has a default expression (atthasdef).
	hasDefault bool
}

// destTableSQL reads the columns of a destination table (not dropped, not
// generated) in order, with their staging type: the base of a domain
// (following domains over domains), with its modifier.
const destTableSQL = `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid,
		format_type(b.oid, b.typmod), coll.nspname, coll.collname,
		coalesce(a.attnum = ANY (i.indkey), false), c.relkind = 'p', a.attnotnull, a.attidentity <> '', a.atthasdef,
		EXISTS (SELECT 1 FROM pg_index x WHERE (x.indrelid = c.oid OR x.indrelid IN (SELECT relid FROM pg_partition_tree(c.oid)))
				AND x.indisunique AND NOT x.indisprimary)
			OR EXISTS (SELECT 1 FROM pg_constraint x WHERE (x.conrelid = c.oid OR x.conrelid IN (SELECT relid FROM pg_partition_tree(c.oid)))
				AND x.contype = 'x'),
		coalesce((SELECT pg_get_userbyid(o.owner)::text FROM (
				SELECT c.relowner AS owner
				UNION ALL
				-- types of its columns (and their array elements) that
				-- another role owns: a domain's owner may add a CHECK
				SELECT ty.typowner FROM pg_attribute ta JOIN pg_type ty ON ty.oid IN (ta.atttypid, (SELECT e.typelem FROM pg_type e WHERE e.oid = ta.atttypid))
				WHERE ta.attrelid = c.oid AND ta.attnum > 0 AND NOT ta.attisdropped AND ty.typtype IN ('d', 'c')) o
			WHERE o.owner <> (SELECT r.oid FROM pg_roles r WHERE r.rolname = CURRENT_USER)
				AND NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = o.owner)
			LIMIT 1), '')
	FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace
	JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
	LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
	LEFT JOIN LATERAL (
		WITH RECURSIVE d(oid, typmod, depth) AS (
			SELECT a.atttypid, a.atttypmod, 0
			UNION ALL
			SELECT t.typbasetype, t.typtypmod, d.depth + 1 FROM d JOIN pg_type t ON t.oid = d.oid AND t.typtype = 'd')
		SELECT d.oid, d.typmod FROM d ORDER BY d.depth DESC LIMIT 1) b ON true
	LEFT JOIN LATERAL (
		SELECT cn.nspname, co.collname FROM pg_collation co JOIN pg_namespace cn ON cn.oid = co.collnamespace
		WHERE co.oid = a.attcollation) coll ON true
	WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')
	ORDER BY a.attnum`

func (a *Applier) destTable(ctx context.Context, name change.TableName) (*destTable, error) {
	if t := a.tables[name]; t != nil {
		return t, nil
	}
	rows, err := a.conn.Query(ctx, destTableSQL, name.Schema, name.Name)
	if err != nil {
		return nil, fmt.Errorf("read columns of destination table %s: %w", name, err)
	}
	t := &destTable{name: name, columns: map[string]destColumn{}, pk: map[string]bool{}, required: map[string]bool{}}
	for rows.Next() {
		var (
			col, typ, stageType  string
			oid                  uint32
			collSchema, collName *string
			pk, part, notNull    bool
			identity, hasDefault bool
			otherUnique          bool
		)
		if err := rows.Scan(&col, &typ, &oid, &stageType, &collSchema, &collName, &pk, &part, &notNull, &identity, &hasDefault, &otherUnique, &t.foreignOwner); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read columns of destination table %s: %w", name, err)
		}
		if collName != nil {
			stageType += " COLLATE " + sqlquote.Ident(*collSchema) + "." + sqlquote.Ident(*collName)
		}
		t.columns[col] = destColumn{typ: typ, typeOID: oid, stage: stageType, hasDefault: hasDefault}
		if pk {
			t.pk[col] = true
		}
		if colsync.Relax(colsync.Dest{NotNull: notNull, HasDefault: hasDefault, Identity: identity, PrimaryKey: pk}) {
			t.required[col] = true
		}
		t.partitioned = part
		t.otherUnique = otherUnique
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of destination table %s: %w", name, err)
	}
	if len(t.columns) == 0 {
		return nil, fmt.Errorf("destination table %s does not exist", name)
	}
	a.tables[name] = t
	return t, nil
}

// plan is how changes of one relation version are applied.
type plan struct {
	rel    *change.Relation
	dest   *destTable
	srcIdx []int // relation column index of each applied column
	// identity: srcIdx is 0, 1, ... over all of the relation's columns, so
	// project returns a row image as it is.
	identity bool
	names    []string // applied column names (same on both sides)
	types    []string // destination SQL types of the applied columns
	// typeOIDs are the destination type OIDs of the applied columns (the
	// types of binary parameters).
	typeOIDs []uint32
	// rowSQL caches the row statements of small chunks (see statement).
	rowSQL map[string]string
	// stageTypes define the staging columns (see destColumn.stage).
	stageTypes []string
	keyed      bool // the destination primary key identifies rows
	// inOrder: keyed, but listed in Config.InOrder, so changes are kept in
	// order (ops) instead of folded by key.
	inOrder bool
	keyPos  []int // positions (in applied columns) of the key columns
	// identPos are positions of the source's replica identity columns
	// (ordered mode, when the old row image holds only the key).
	identPos []int

	// arrayCasts are the array types of the columns when a chunk of
	// complete-row updates can be written from arrays (updateFromArrays);
	// nil when not.
	arrayCasts []string

	stage     string // keyed: staging table name, "" until created
	stageUsed bool   // keyed: the staging table has rows in this transaction

	entries map[string]*entry // keyed: final state per key
	order   []string          // keyed: keys in first-seen order
	ops     []*change.Change  // ordered and inOrder: changes in order

	// keyBuf and oldKeyBuf hold the key encodings of the change being
	// folded. entryBlock[:entriesUsed] are the entries newEntry handed out
	// of the plan's own block, entryOverflow what is left of a block
	// allocated for a chunk larger than it.
	keyBuf, oldKeyBuf []byte
	entryBlock        []entry
	entriesUsed       int
	entryOverflow     []entry
}

func (p *plan) buffered() bool { return len(p.entries) > 0 || len(p.ops) > 0 }

// planFor returns the plan for rel, or nil when rel has no mapping.
func (a *Applier) planFor(ctx context.Context, rel *change.Relation) (*plan, error) {
	if p := a.plans[rel]; p != nil {
		return p, nil
	}
	m := a.mappings[rel.Table]
	if m == nil {
		return nil, nil
	}
	old := a.current[rel.Table]
	if old != nil && sameShape(old.rel, rel) {
		// The source re-sends descriptions after cache invalidations that
		// change nothing we use (VACUUM, ANALYZE): keep the plan and its
		// staging table.
		delete(a.plans, old.rel)
		old.rel = rel
		a.plans[rel] = old
		return old, nil
	}
	if old != nil && a.cfg.Early {
		return nil, fmt.Errorf("table %s described again with other columns: %w", rel.Table, ErrNotEarly)
	}
	// Tracked columns: reconcile reports the changes (SchemaHooks).
	tracked := a.cfg.SchemaChanges != ""
	reported := map[string]bool{}
	if old != nil {
		var err error
		if reported, err = a.retirePlan(ctx, m, old, rel, tracked); err != nil {
			return nil, err
		}
	}
	if tracked {
		// The source's columns compared with those known: renamed,
		// dropped, added or retyped ones are applied at this position,
		// reported, or stop the run (schema.go).
		if err := a.reconcile(ctx, m, rel); err != nil {
			return nil, err
		}
	}
	if a.cfg.Binary {
		if err := checkBinary(m, rel, a.cfg.BinaryTypes[rel.Table]); err != nil {
			return nil, err
		}
	}
	dest, err := a.destFor(ctx, m, rel)
	if err != nil {
		return nil, err
	}
	if err := a.relaxUnsent(ctx, m, rel, dest, reported); err != nil {
		return nil, err
	}
	p, err := newPlan(m, rel, dest)
	if err != nil {
		return nil, err
	}
	p.inOrder = p.keyed && a.cfg.InOrder[rel.Table]
	a.plans[rel] = p
	a.current[rel.Table] = p
	return p, nil
}

// retirePlan ends the plan old of a table whose shape changed on the source
// (DDL): it reports the dropped columns (when not tracked by reconcile),
// writes what was buffered under the old shape first, to keep the order,
// and drops the old staging table. It returns the dropped columns, as
// reported.
func (a *Applier) retirePlan(ctx context.Context, m *change.Mapping, old *plan, rel *change.Relation, tracked bool) (map[string]bool, error) {
	reported := map[string]bool{}
	dropped := droppedColumns(old.rel, rel)
	if len(dropped) > 0 && a.cfg.OnColumnsDropped != nil && !tracked {
		a.cfg.OnColumnsDropped(ctx, rel.Table, dropped)
	}
	for _, c := range dropped {
		reported[c] = true
	}
	if err := a.flush(ctx); err != nil {
		return nil, err
	}
	if old.stage != "" {
		if err := a.begin(ctx); err != nil {
			return nil, err
		}
		if _, err := a.conn.Exec(ctx, dropStageSQL(old.stage)); err != nil {
			return nil, fmt.Errorf("drop staging table for %s: %w", old.dest.name, err)
		}
	}
	delete(a.plans, old.rel)
	// A schema sync may have changed the destination along (a type).
	delete(a.tables, m.Destination)
	return reported, nil
}

// destFor returns the destination table of m as the plan for rel needs it:
// read again when one of rel's columns seems missing (a schema sync may
// have added it since it was read), and with the key followed (followKey).
func (a *Applier) destFor(ctx context.Context, m *change.Mapping, rel *change.Relation) (*destTable, error) {
	dest, err := a.destTable(ctx, m.Destination)
	if err != nil {
		return nil, err
	}
	for _, c := range rel.Columns {
		if _, ok := dest.columns[c.Name]; !ok && !m.Excluded(c.Name) {
			delete(a.tables, m.Destination)
			if dest, err = a.destTable(ctx, m.Destination); err != nil {
				return nil, err
			}
			break
		}
	}
	return a.followKey(ctx, m, rel, dest)
}

// newPlan maps rel's columns (those not excluded) onto dest's, and decides
// whether the table is applied by key: every destination key column is in
// the stream, and in every old row image the source sends.
func newPlan(m *change.Mapping, rel *change.Relation, dest *destTable) (*plan, error) {
	p := &plan{rel: rel, dest: dest, entries: map[string]*entry{}}
	for i, c := range rel.Columns {
		if m.Excluded(c.Name) {
			continue
		}
		col, ok := dest.columns[c.Name]
		if !ok {
			return nil, fmt.Errorf("%w: destination table %s has no column %q of source table %s (sync the schema)", ErrMissingColumn, m.Destination, c.Name, rel.Table)
		}
		if c.Key {
			p.identPos = append(p.identPos, len(p.names))
		}
		if dest.pk[c.Name] {
			p.keyPos = append(p.keyPos, len(p.names))
		}
		p.srcIdx = append(p.srcIdx, i)
		p.names = append(p.names, c.Name)
		p.types = append(p.types, col.typ)
		p.typeOIDs = append(p.typeOIDs, col.typeOID)
		p.stageTypes = append(p.stageTypes, col.stage)
	}
	p.identity = len(p.srcIdx) == len(rel.Columns)
	for i, s := range p.srcIdx {
		p.identity = p.identity && s == i
	}
	p.keyed = len(dest.pk) > 0 && len(p.keyPos) == len(dest.pk)
	if p.keyed && rel.ReplicaIdentity != change.IdentityFull {
		for _, k := range p.keyPos {
			if !rel.Columns[p.srcIdx[k]].Key {
				p.keyed = false
			}
		}
	}
	if p.keyed {
		p.arrayCasts = arrayCasts(p.typeOIDs, p.keyPos)
	}
	return p, nil
}

// relaxUnsent drops NOT NULL from destination columns (outside the primary
// key, without a default, not an identity: colsync.Relax; not excluded)
// that the source does not send, typically columns dropped or renamed on
// the source: inserts leave them NULL, and would fail otherwise. It runs in the batch transaction and
// reports the columns not yet reported as dropped.
func (a *Applier) relaxUnsent(ctx context.Context, m *change.Mapping, rel *change.Relation, dest *destTable, reported map[string]bool) error {
	sent := map[string]bool{}
	for _, c := range rel.Columns {
		sent[c.Name] = true
	}
	for col := range dest.required {
		// Excluded columns are the user's choice: leave their definition.
		if sent[col] || m.Excluded(col) {
			continue
		}
		if a.cfg.Early {
			return fmt.Errorf("destination column %s of %s is required and not sent: %w", col, dest.name, ErrNotEarly)
		}
		stmt := dropNotNullSQL(dest.name, col)
		if err := a.begin(ctx); err != nil {
			return err
		}
		if _, err := a.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("relax destination column the source does not send: %s: %w", stmt, err)
		}
		delete(dest.required, col)
		a.log.Warn("destination column is not sent by the source; dropped its NOT NULL so rows can be inserted",
			"table", dest.name.String(), "column", col)
		if a.cfg.OnColumnsDropped != nil && !reported[col] {
			a.cfg.OnColumnsDropped(ctx, rel.Table, []string{col})
		}
	}
	return nil
}

// droppedColumns returns the columns of before that after no longer has.
func droppedColumns(before, after *change.Relation) []string {
	now := map[string]bool{}
	for _, c := range after.Columns {
		now[c.Name] = true
	}
	var out []string
	for _, c := range before.Columns {
		if !now[c.Name] {
			out = append(out, c.Name)
		}
	}
	return out
}

// sameShape reports whether two descriptions of a table have the same
// columns, types, key flags and replica identity.
func sameShape(a, b *change.Relation) bool {
	if a.ReplicaIdentity != b.ReplicaIdentity || len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		if a.Columns[i] != b.Columns[i] {
			return false
		}
	}
	return true
}

// project maps a source row image to applied-column order. The result may
// be vals itself (see plan.identity): callers must not modify it.
func (p *plan) project(vals []change.Value) []change.Value {
	if p.identity && len(vals) == len(p.srcIdx) {
		return vals
	}
	out := make([]change.Value, len(p.srcIdx))
	for i, s := range p.srcIdx {
		out[i] = vals[s]
	}
	return out
}

// checkBinary returns an error matching ErrBinaryMismatch when a column of
// rel that is replicated is not in checked (column name to the source type
// OID checked when the run started) with the type the source now sends.
func checkBinary(m *change.Mapping, rel *change.Relation, checked map[string]uint32) error {
	for _, c := range rel.Columns {
		if m.Excluded(c.Name) {
			continue
		}
		oid, ok := checked[c.Name]
		switch {
		case !ok:
			return fmt.Errorf("%w: column %q of %s was not checked", ErrBinaryMismatch, c.Name, rel.Table)
		case oid != c.TypeOID:
			return fmt.Errorf("%w: column %q of %s has type OID %d, checked was %d", ErrBinaryMismatch, c.Name, rel.Table, c.TypeOID, oid)
		}
	}
	return nil
}
