package apply

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/session"
)

// ErrForeignKeyViolation matches (errors.Is) a destination foreign key
// violation (SQLSTATE 23503). With session_replication_role = replica
// (the default whenever the destination user may set it) foreign keys are
// not checked and this cannot happen.
var ErrForeignKeyViolation = errors.New("foreign key violation on the destination")

// ErrMissingColumn matches (errors.Is) a source column, not excluded, that
// the destination table lacks: the destination schema must be synced (for
// example after a column was added on the source) before CDC can go on.
var ErrMissingColumn = errors.New("destination table lacks a replicated column")

// ErrBinaryMismatch matches (errors.Is) a column that the source sends in
// binary whose type was not checked (Config.BinaryTypes): its type changed
// on the source, or it is new; also a text value among binary ones. The
// stream must be restarted in a format decided anew.
var ErrBinaryMismatch = errors.New("the source sends a column in binary whose type was not checked; restart the stream in a format decided anew")

// OrderConflictError is a violation met while a chunk of a table's changes
// was applied folded by key that the source's order may not meet: a unique
// or exclusion violation on a destination table with unique constraints
// besides its primary key (the rows may only have traded a unique value
// within the chunk: a to tmp, b to a, a to b), or a foreign key violation
// when foreign keys are checked (a self-referencing table); also a row the
// destination already has, met by a chunk of new rows written by COPY
// (in order, inserts are upserts). The batch must
// be rolled back and applied again with Table in Config.InOrder. A
// violation met in order is a real one (the destination holds rows the
// source does not) and is returned as it is.
type OrderConflictError struct {
	// Table is the source table whose changes must be applied in order.
	Table change.TableName
	Err   error
}

func (e *OrderConflictError) Error() string {
	return fmt.Sprintf("%v (applying the changes of %s in the source's order may resolve it)", e.Err, e.Table)
}

func (e *OrderConflictError) Unwrap() error { return e.Err }

// Config configures an Applier.
type Config struct {
	// MirrorUID identifies the mirror's row in _pgmirror.applied.
	MirrorUID string
	// Mappings says where each source table goes and which columns stay out.
	Mappings []change.Mapping
	// ChunkSize is how many changes are buffered before they are written
	// into the open destination transaction. Default 5000.
	ChunkSize int
	// ChunkBytes also ends a chunk once the buffered values hold this many
	// bytes (for rows with large values). Default 64 MiB.
	ChunkBytes int
	// RowStatementsUpTo: a chunk of a keyed table with at most this many
	// keys is written with one statement per key, pipelined in one round
	// trip, instead of COPY into a staging table and set-based statements
	// (cheaper for the few rows of a batch under light load). Default 8;
	// negative: always stage.
	RowStatementsUpTo int
	// Binary says that the stream sends binary values; every column's
	// source type OID must be in BinaryTypes. A relation with a replicated
	// column that is not, or has another type OID, fails Apply with an
	// error matching ErrBinaryMismatch.
	Binary bool
	// BinaryTypes maps a source table to its columns' source type OIDs
	// (column name to OID), each checked to be identical and portable on
	// both sides when the run started.
	BinaryTypes map[change.TableName]map[string]uint32
	// InOrder lists source tables whose changes are applied one statement
	// per change in the source's order instead of folded by key (see
	// OrderConflictError and flushKeyedInOrder).
	InOrder map[change.TableName]bool
	// Logger receives warnings. Default: discard.
	Logger *slog.Logger
	// OnColumnsDropped, when set, is called when the source describes a
	// table again without columns it sent before (dropped or renamed on the
	// source). The destination keeps those columns; new rows leave them
	// to their default.
	OnColumnsDropped func(ctx context.Context, table change.TableName, columns []string)
	// SchemaChanges is what the applier does when a mapped table's columns
	// change on the source (see schema.go). "" keeps no record of the
	// source's columns and behaves as SchemaWarn.
	SchemaChanges SchemaMode
	// Source reads the source catalog (attnums, types, defaults) for
	// SchemaChanges. Without it columns are matched by name and position
	// only, and a change that needs a column's type fails the batch: set
	// it for SchemaApply.
	Source SourceCatalog
	// SchemaHooks hear of schema changes applied, warned about or needing a
	// table resync.
	SchemaHooks SchemaHooks
	// Early says that the applier writes a source transaction that is
	// still open on the source (a streamed one, applied while it streams)
	// beside another applier's batches on the same destination. Its
	// transaction takes row locks, and the table locks of the truncates
	// the source's transaction holds too (no other source transaction
	// writes those tables before its commit): whatever would change the
	// destination's schema or record columns fails with an error matching
	// ErrNotEarly instead, and the caller applies the transaction the
	// ordinary way at its commit.
	Early bool
}

// ErrNotEarly matches (errors.Is) a change that an applier in Early mode
// does not write: a table whose columns or key differ from what the
// destination and the recorded columns say (a schema change to apply
// first).
var ErrNotEarly = errors.New("the change needs more than row writes: apply the transaction at its commit")

// Applier writes batches of source changes to the destination. It owns its
// connection for its life (temporary staging tables live in the session)
// and is not safe for concurrent use.
//
// A batch is Begin, any number of Apply calls, then Commit (or Rollback).
// The whole batch is one destination transaction that also records the
// applied position, so the destination never shows part of a batch and
// never applies a batch twice.
//
// Foreign keys and triggers: the session runs with
// session_replication_role = replica, as PostgreSQL's own apply worker does,
// so destination foreign keys and ordinary triggers do not fire; the source
// already checked the constraints, and the destination converges to the
// source's state at every batch boundary. If the destination user may not
// set it (it needs superuser), the applier logs a warning and applies with
// constraints checked, writing each run of consecutive changes to one table
// before the next so that the source's order across tables is kept; a
// violation is then returned as an error matching ErrForeignKeyViolation.
// Within one table, collapsing by key still reorders changes, so a
// self-referencing foreign key can fail in that mode: that violation is an
// OrderConflictError, and the table is then applied in order.
type Applier struct {
	conn     *pgx.Conn
	cfg      Config
	log      *slog.Logger
	mappings map[change.TableName]*change.Mapping
	tables   map[change.TableName]*destTable
	plans    map[*change.Relation]*plan
	current  map[change.TableName]*plan // latest plan per source table
	// known holds the source columns known per table (schema.go), read
	// from the destination on first use; forgotten with the transaction.
	known map[change.TableName][]knownColumn
	// schemaDone are the schema changes of the open batch (schema.go).
	schemaDone []schemaReport
	dirty      []*plan // plans with buffered changes, in first-use order
	inBatch    bool    // a batch transaction is open in the session
	begun      bool    // the batch's BEGIN was sent
	// While Commit flushes, the last plan's row statements may wait for
	// the commit's round trip instead of taking their own (see
	// flushKeyedRows): tailAllowed says the plan being flushed may, tail
	// holds them.
	tailAllowed bool
	tail        *tailRows
	statements  map[string]string // binary row statements prepared on the connection: SQL -> name
	pending     int
	pendingSize int
	counts      map[change.TableName]*change.Counts
	stageSeq    int
	replicaRole bool
	lastPlan    *plan // plan of the previous change (ordering without replica role)
	copy        copyWriter
	// arrays and arrayFormats are updateFromArrays' parameter buffers.
	arrays       [][]byte
	arrayFormats []int16
	// commitWAL and flushedWAL are the destination's WAL insert and flush
	// positions read right after the last commit.
	commitWAL, flushedWAL change.LSN
	// savepoints are those of the open batch, in the order set
	// (savepoint.go).
	savepoints []savepoint
}

// New prepares an Applier on conn: it creates the metadata table when
// absent, sets session_replication_role = replica when allowed, and sets
// synchronous_commit = off, as PostgreSQL's own apply worker does: a commit
// does not wait for its WAL flush. The caller confirms to the source only
// positions whose commit is flushed (see LastCommitWAL); a commit lost in a
// destination crash was never confirmed, so the source sends it again.
func New(ctx context.Context, conn *pgx.Conn, cfg Config) (*Applier, error) {
	cfg.ChunkSize = cmp.Or(cfg.ChunkSize, 5000)
	cfg.ChunkBytes = cmp.Or(cfg.ChunkBytes, 64<<20)
	cfg.RowStatementsUpTo = cmp.Or(cfg.RowStatementsUpTo, defaultRowStatementsUpTo)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Applier{
		conn:     conn,
		cfg:      cfg,
		log:      logger,
		mappings: map[change.TableName]*change.Mapping{},
		tables:   map[change.TableName]*destTable{},
		plans:    map[*change.Relation]*plan{},
		current:  map[change.TableName]*plan{},
		known:    map[change.TableName][]knownColumn{},
		counts:   map[change.TableName]*change.Counts{},

		statements: map[string]string{},
	}
	for i := range cfg.Mappings {
		m := cfg.Mappings[i]
		a.mappings[m.Source] = &m
	}
	if err := positions.Ensure(ctx, conn); err != nil {
		return nil, err
	}
	_, err := conn.Exec(ctx, "SET session_replication_role = replica")
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		a.replicaRole = true
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		a.log.Warn("destination user may not set session_replication_role; foreign keys and triggers on the destination will fire during apply")
	default:
		return nil, fmt.Errorf("set session_replication_role on destination: %w", err)
	}
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		return nil, fmt.Errorf("set synchronous_commit on destination: %w", err)
	}
	// The statements of every commit's round trip, parsed and planned once.
	if err := positions.PrepareApplied(ctx, conn.PgConn()); err != nil {
		return nil, err
	}
	if err := session.Prepare(ctx, conn.PgConn(), walPositionsStatement, walPositionsSQL); err != nil {
		return nil, fmt.Errorf("prepare the statement that reads the WAL positions: %w", err)
	}
	return a, nil
}

// Config returns the applier's configuration, with its defaults filled in.
func (a *Applier) Config() Config { return a.cfg }

// InBatch reports whether a batch transaction is open.
func (a *Applier) InBatch() bool { return a.inBatch }

// Begin opens the batch transaction. The transaction is the session's: every
// statement of the batch goes on the connection inside it. BEGIN itself is
// sent with the batch's first statements, in the same round trip.
func (a *Applier) Begin(ctx context.Context) error {
	if a.inBatch {
		return errors.New("begin batch: a batch is already open")
	}
	a.inBatch = true
	a.begun = false
	return nil
}

// begin sends the batch's BEGIN now, unless it went already: for statements
// that cannot carry it in their own round trip.
func (a *Applier) begin(ctx context.Context) error {
	if a.begun {
		return nil
	}
	if _, err := a.conn.PgConn().Exec(ctx, "BEGIN").ReadAll(); err != nil {
		return fmt.Errorf("begin destination transaction: %w", err)
	}
	a.begun = true
	return nil
}

// Apply adds one change to the open batch. Changes are buffered and written
// in chunks of Config.ChunkSize; changes to tables without a mapping are
// ignored.
func (a *Applier) Apply(ctx context.Context, c *change.Change) error {
	if !a.inBatch {
		return errors.New("apply change: no batch open")
	}
	if c.Op == change.OpTruncate {
		return a.truncate(ctx, c)
	}
	p, err := a.planFor(ctx, c.Relation)
	if err != nil || p == nil {
		return err
	}
	cnt := a.counts[c.Relation.Table]
	if cnt == nil {
		cnt = &change.Counts{}
		a.counts[c.Relation.Table] = cnt
	}
	switch c.Op {
	case change.OpInsert:
		cnt.Inserted++
	case change.OpUpdate:
		cnt.Updated++
	case change.OpDelete:
		cnt.Deleted++
	default:
		return fmt.Errorf("apply change: unknown operation %d", c.Op)
	}
	if !a.replicaRole && a.lastPlan != p && a.pending > 0 {
		// Foreign keys are checked: keep the source's order across tables
		// by writing each run of changes to one table before the next.
		if err := a.flush(ctx); err != nil {
			return err
		}
	}
	a.lastPlan = p
	if !p.buffered() {
		a.dirty = append(a.dirty, p)
	}
	if p.keyed && !p.inOrder {
		if mv := p.fold(c); mv != nil {
			// The row moved to a new key and keeps values only the
			// destination has: write the chunk, then move it in place.
			if err := a.flushPlan(ctx, p); err != nil {
				return err
			}
			if err := a.moveRow(ctx, p, mv.old, mv.new); err != nil {
				return err
			}
		}
	} else {
		p.ops = append(p.ops, c)
	}
	a.pending++
	a.pendingSize += c.Size()
	if a.pending >= a.cfg.ChunkSize || a.pendingSize >= a.cfg.ChunkBytes {
		return a.flush(ctx)
	}
	return nil
}

// Commit writes what is buffered, records lsn and batchID as the mirror's
// applied position in the same transaction, and commits, reading the
// destination's WAL positions in the same round trip (see LastCommitWAL).
// It returns the per-table counts of the batch (key: source schema.table).
// When writing fails, the batch stays open for Rollback; when the commit
// itself fails, it is closed (and, unless the connection broke first, not
// on the destination).
func (a *Applier) Commit(ctx context.Context, lsn change.LSN, batchID int64) (map[change.TableName]change.Counts, error) {
	if !a.inBatch {
		return nil, errors.New("commit batch: no batch open")
	}
	if err := a.flushAll(ctx, true); err != nil {
		return nil, err
	}
	// One round trip: BEGIN if nothing was sent yet, or the last row
	// statements (with BEGIN if they start the transaction), the applied
	// position, COMMIT, the WAL positions.
	b, began, tail := &pgconn.Batch{}, !a.begun, a.tail
	a.tail = nil
	switch {
	case tail != nil:
		b, began = &tail.rows.bin, tail.rows.begins
	case began:
		b.ExecParams("BEGIN", nil, nil, nil, nil)
	}
	positions.QueueApplied(b, a.cfg.MirrorUID, lsn, batchID)
	b.ExecParams("COMMIT", nil, nil, nil, nil)
	b.ExecPrepared(walPositionsStatement, nil, nil, nil)
	results, err := a.conn.PgConn().ExecBatch(ctx, b).ReadAll()
	if began && len(results) > 0 && results[0].Err == nil {
		a.begun = true
		results = results[1:]
	}
	if tail != nil {
		// A failed row statement (its result is the error, or missing):
		// COMMIT did not run, so leave the batch open for Rollback.
		for i, op := range tail.rows.ops {
			switch {
			case i < len(results) && results[i].Err != nil:
				return nil, a.classifyFolded(tail.plan, fmt.Errorf("apply %s to %s: %w", op, tail.plan.dest.name, results[i].Err))
			case i >= len(results) && err != nil:
				return nil, a.classifyFolded(tail.plan, fmt.Errorf("apply %s to %s: %w", op, tail.plan.dest.name, err))
			}
		}
		results = results[len(tail.rows.ops):]
	}
	if err != nil && (len(results) == 0 || results[0].Err != nil) {
		// The applied position was not written, so COMMIT did not run: the
		// transaction is still open (and failed). Leave the batch open for
		// Rollback, as when writing the changes fails.
		return nil, classify(fmt.Errorf("record applied position %s of mirror %s: %w", lsn, a.cfg.MirrorUID, err))
	}
	a.inBatch = false
	switch {
	case err == nil:
		a.commitWAL, a.flushedWAL, err = commitPositions(results[1:])
	case len(results) > 2 && results[1].Err == nil && results[1].CommandTag.String() == "COMMIT":
		err = fmt.Errorf("committed, but reading the destination's WAL positions failed: %w", err)
	}
	if err != nil {
		a.reset()
		return nil, classify(fmt.Errorf("commit batch %d at %s: %w", batchID, lsn, err))
	}
	for _, p := range a.plans {
		p.stageUsed = false
	}
	for _, t := range a.tables {
		t.guarded = false // guarded again in the next batch's transaction
	}
	counts := make(map[change.TableName]change.Counts, len(a.counts))
	for k, v := range a.counts {
		counts[k] = *v
	}
	a.counts = map[change.TableName]*change.Counts{}
	a.reportSchema(ctx)
	return counts, nil
}

// SetTablePositions records, inside the open batch, the per-table positions
// in set and forgets those of the tables in forget (positions.SetTables).
func (a *Applier) SetTablePositions(ctx context.Context, set map[change.TableName]change.LSN, forget []change.TableName) error {
	if !a.inBatch {
		return errors.New("set table positions: no batch open")
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	return positions.SetTables(ctx, a.conn, a.cfg.MirrorUID, set, forget)
}

// Rollback abandons the open batch (nothing of it reaches the destination).
func (a *Applier) Rollback(ctx context.Context) error {
	if !a.inBatch {
		return nil
	}
	var err error
	if a.begun {
		_, err = a.conn.PgConn().Exec(ctx, "ROLLBACK").ReadAll()
	}
	a.inBatch = false
	a.reset()
	if err != nil {
		return fmt.Errorf("roll back destination transaction: %w", err)
	}
	return nil
}

// LastCommitWAL returns the destination's WAL positions read right after the
// last successful Commit: commit is the WAL insert position (the batch's
// commit record is at or before it) and flushed the WAL flush position at
// the same moment. Once the destination's flush position reaches commit,
// the batch survives a destination crash (with synchronous_commit = off a
// commit returns before its WAL is flushed). Both are zero before the first
// commit.
func (a *Applier) LastCommitWAL() (commit, flushed change.LSN) {
	return a.commitWAL, a.flushedWAL
}

// walPositionsSQL reads the destination's WAL insert and flush positions;
// Commit runs it right after COMMIT in the same round trip.
const walPositionsSQL = "SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_current_wal_flush_lsn()::text"

// walPositionsStatement is walPositionsSQL prepared on the session (New).
const walPositionsStatement = "pgmirror_wal_positions"

// commitPositions checks the results of COMMIT and walPositionsSQL and
// returns the WAL insert and flush positions read.
func commitPositions(results []*pgconn.Result) (commit, flushed change.LSN, err error) {
	if len(results) != 2 {
		return 0, 0, fmt.Errorf("commit answered %d results, want 2", len(results))
	}
	for _, r := range results {
		if r.Err != nil {
			return 0, 0, r.Err
		}
	}
	if tag := results[0].CommandTag.String(); tag != "COMMIT" {
		// COMMIT of a transaction that failed answers ROLLBACK.
		return 0, 0, fmt.Errorf("the destination rolled the transaction back (it answered %s to COMMIT)", tag)
	}
	if len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 2 {
		return 0, 0, errors.New("read WAL positions after commit: unexpected answer")
	}
	row := results[1].Rows[0]
	if commit, err = change.ParseLSN(string(row[0])); err != nil {
		return 0, 0, fmt.Errorf("read WAL insert position after commit: %w", err)
	}
	if flushed, err = change.ParseLSN(string(row[1])); err != nil {
		return 0, 0, fmt.Errorf("read WAL flush position after commit: %w", err)
	}
	return commit, flushed, nil
}

// reset forgets everything tied to the session's transaction state: a
// rolled-back transaction may have created staging tables that are gone.
func (a *Applier) reset() {
	a.plans = map[*change.Relation]*plan{}
	a.current = map[change.TableName]*plan{}
	a.known = map[change.TableName][]knownColumn{}
	a.schemaDone = nil
	a.tables = map[change.TableName]*destTable{}
	a.dirty = nil
	a.lastPlan = nil
	a.pending = 0
	a.pendingSize = 0
	a.counts = map[change.TableName]*change.Counts{}
	a.tail = nil
	a.savepoints = nil
}

// guardWrites refuses, before the batch's first write into dest, a
// table owned by another role whose writes would run that role's code
// with the applier's privileges (exprcheck.GuardWrites). Tables that the
// session's role or a superuser owns cost nothing: the owner comes with
// the table's description.
func (a *Applier) guardWrites(ctx context.Context, dest *destTable) error {
	if dest.foreignOwner == "" || dest.guarded {
		return nil
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	if err := exprcheck.GuardWrites(ctx, a.conn, dest.name.Quoted(), dest.foreignOwner, a.replicaRole); err != nil {
		return err
	}
	dest.guarded = true
	return nil
}

// flush writes every buffered change into the open transaction.
func (a *Applier) flush(ctx context.Context) error {
	return a.flushAll(ctx, false)
}

// flushAll is flush; with keepTail (Commit) the last plan's row statements
// may be left in a.tail for the commit's round trip.
func (a *Applier) flushAll(ctx context.Context, keepTail bool) error {
	for i, p := range a.dirty {
		a.tailAllowed = keepTail && i == len(a.dirty)-1
		err := a.flushPlan(ctx, p)
		a.tailAllowed = false
		if err != nil {
			return err
		}
	}
	a.dirty = a.dirty[:0]
	a.pending = 0
	a.pendingSize = 0
	return nil
}

func (a *Applier) flushPlan(ctx context.Context, p *plan) error {
	if err := a.guardWrites(ctx, p.dest); err != nil {
		return err
	}
	switch {
	case p.inOrder:
		return a.flushKeyedInOrder(ctx, p)
	case p.keyed:
		err := a.flushKeyed(ctx, p)
		p.recycleEntries()
		return err
	default:
		return a.flushOrdered(ctx, p)
	}
}

func (a *Applier) truncate(ctx context.Context, c *change.Change) error {
	if err := a.flush(ctx); err != nil {
		return err
	}
	var names []change.TableName
	for _, rel := range c.Truncated {
		if m := a.mappings[rel.Table]; m != nil {
			names = append(names, m.Destination)
			cnt := a.counts[rel.Table]
			if cnt == nil {
				cnt = &change.Counts{}
				a.counts[rel.Table] = cnt
			}
			cnt.Truncated++
		}
	}
	if len(names) == 0 {
		return nil
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	for _, name := range names {
		dest, err := a.destTable(ctx, name)
		if err != nil {
			return err
		}
		if err := a.guardWrites(ctx, dest); err != nil {
			return err
		}
	}
	if _, err := a.conn.Exec(ctx, truncateSQL(names, c.RestartIdentity, c.Cascade)); err != nil {
		return classify(fmt.Errorf("truncate %s: %w", joinNames(names), err))
	}
	return nil
}

// classify marks foreign key violations with ErrForeignKeyViolation.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		return fmt.Errorf("%w: %w", ErrForeignKeyViolation, err)
	}
	return err
}

// classifyFolded is classify for an error writing p's changes. When p was
// folded by key, a violation that the source's order may not have met is an
// OrderConflictError: a unique (23505) or exclusion (23P01) violation on a
// destination with unique constraints besides its primary key, or, when
// foreign keys are checked (session_replication_role is not replica), a
// foreign key violation (in a self-referencing table, a row updated to
// reference one that the chunk inserts: the folded UPDATE runs before the
// INSERT).
func (a *Applier) classifyFolded(p *plan, err error) error {
	var pgErr *pgconn.PgError
	if p.keyed && !p.inOrder && errors.As(err, &pgErr) {
		switch {
		case (pgErr.Code == "23505" || pgErr.Code == "23P01") && p.dest.otherUnique,
			pgErr.Code == "23503" && !a.replicaRole:
			return &OrderConflictError{Table: p.rel.Table, Err: classify(err)}
		}
	}
	return classify(err)
}

// joinNames lists table names for messages.
func joinNames(names []change.TableName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = n.String()
	}
	return strings.Join(s, ", ")
}
