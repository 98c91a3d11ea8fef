package apply_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var seq atomic.Int64

func text(s string) change.Value { return change.Value{Kind: change.ValueText, Text: []byte(s)} }

var (
	null      = change.Value{Kind: change.ValueNull}
	unchanged = change.Value{Kind: change.ValueUnchanged}
)

// Source-side descriptions of the test tables.
var (
	parentRel = &change.Relation{ID: 1, Table: change.TableName{Schema: "public", Name: "parent"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true}}}
	childRel = &change.Relation{ID: 2, Table: change.TableName{Schema: "public", Name: "child"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true}, {Name: "parent_id"}, {Name: "note"}}}
)

const fkDDL = `CREATE TABLE public.parent (id int PRIMARY KEY);
	CREATE TABLE public.child (id int PRIMARY KEY, parent_id int REFERENCES public.parent, note text)`

func mappings() []change.Mapping {
	return []change.Mapping{
		{Source: parentRel.Table, Destination: parentRel.Table},
		{Source: childRel.Table, Destination: childRel.Table},
	}
}

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestReplicaRoleSkipsForeignKeys: as superuser the applier runs with
// session_replication_role = replica, so a child row may arrive before its
// parent within a batch (as collapsing and chunking can reorder them).
func TestReplicaRoleSkipsForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, fkDDL)
	conn := connect(t, dst)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()})
	require.NoError(t, err)
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("1"), text("10"), text("n")}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: parentRel, New: []change.Value{text("10")}}))
	counts, err := a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)
	require.Equal(t, change.Counts{Inserted: 1}, counts[change.TableName{Schema: "public", Name: "child"}])
	require.Equal(t, change.Counts{Inserted: 1}, counts[change.TableName{Schema: "public", Name: "parent"}])
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM child JOIN parent ON parent.id = child.parent_id`).Scan(&n))
	require.Equal(t, 1, n)
}

// TestForeignKeyViolationIsTyped: a destination user that may not set
// session_replication_role gets foreign keys checked, and a violation is a
// typed error; the batch leaves nothing behind.
func TestForeignKeyViolationIsTyped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectUnprivileged(t, fkDDL)

	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()})
	require.NoError(t, err)
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("1"), text("99"), null}}))
	_, err = a.Commit(ctx, 0x100, 1)
	require.ErrorIs(t, err, apply.ErrForeignKeyViolation)
	require.NoError(t, a.Rollback(ctx))
	require.False(t, a.InBatch())

	// The applier is usable again afterwards.
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: parentRel, New: []change.Value{text("99")}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("1"), text("99"), null}}))
	_, err = a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)

	// It keeps the source's order across tables: the child is written
	// before the parent it is then moved to.
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("6"), text("99"), null}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: parentRel, New: []change.Value{text("3")}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: childRel, New: []change.Value{text("6"), text("3"), null}}))
	_, err = a.Commit(ctx, 0x200, 2)
	require.NoError(t, err)
}

// TestUnchangedWithoutEarlierImage: an update with an unchanged TOAST
// value keeps the destination's value; NULLs and changed columns are set.
func TestUnchangedWithoutEarlierImage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.child (id int PRIMARY KEY, parent_id int, note text);
		INSERT INTO child VALUES (1, 5, 'keep me'), (2, 6, 'keep me too')`)
	conn := connect(t, dst)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()[1:]})
	require.NoError(t, err)
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: childRel, New: []change.Value{text("1"), null, unchanged}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: childRel, New: []change.Value{text("2"), text("7"), unchanged}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: childRel, New: []change.Value{text("2"), text("8"), unchanged}}))
	counts, err := a.Commit(ctx, 0x200, 1)
	require.NoError(t, err)
	require.Equal(t, change.Counts{Updated: 3}, counts[change.TableName{Schema: "public", Name: "child"}])
	var got string
	require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(format('%s/%s/%s', id, parent_id, note), ',' ORDER BY id) FROM child`).Scan(&got))
	require.Equal(t, "1//keep me,2/8/keep me too", got)
}

func TestMissingDestinationColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.child (id int PRIMARY KEY, parent_id int)`)
	conn := connect(t, dst)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()[1:]})
	require.NoError(t, err)
	require.NoError(t, a.Begin(ctx))
	err = a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("1"), null, null}})
	require.ErrorIs(t, err, apply.ErrMissingColumn)
	require.ErrorContains(t, err, `no column "note"`)
	require.NoError(t, a.Rollback(ctx))
}

func dbName(t *testing.T, u string) string {
	p, err := url.Parse(u)
	require.NoError(t, err)
	return p.Path[1:]
}

// TestKeyedStates: each final state of a key is applied with its own
// statement, and an update of a row the destination lacks (a mirror
// started without a snapshot over a partly filled destination) inserts it,
// as an insert of a row it has updates it.
func TestKeyedStates(t *testing.T) {
	t.Parallel()
	// Once with staging and set-based statements, once with a statement per
	// key (Config.RowStatementsUpTo): the outcome is the same.
	for _, rowsUpTo := range []int{-1, 100} {
		t.Run(fmt.Sprintf("row statements up to %d keys", rowsUpTo), func(t *testing.T) {
			t.Parallel()
			testKeyedStates(t, rowsUpTo)
		})
	}
}

func testKeyedStates(t *testing.T, rowsUpTo int) {
	ctx := context.Background()
	child := func(vals ...change.Value) []change.Value { return vals }
	changes := []*change.Change{
		{Op: change.OpUpdate, Relation: childRel, New: child(text("1"), text("2"), text("one!"))},
		{Op: change.OpUpdate, Relation: childRel, New: child(text("9"), text("2"), text("nine"))},
		{Op: change.OpInsert, Relation: childRel, New: child(text("2"), text("2"), text("two!"))},
		{Op: change.OpDelete, Relation: childRel, Old: child(text("3"), null, null), OldKeyOnly: true},
		{Op: change.OpInsert, Relation: childRel, New: child(text("5"), null, text("five"))},
		{Op: change.OpUpdate, Relation: childRel, New: child(text("4"), text("2"), unchanged)},
		{Op: change.OpInsert, Relation: childRel, New: child(text("6"), null, text("six"))},
		{Op: change.OpUpdate, Relation: childRel, New: child(text("6"), text("1"), unchanged)},
		{Op: change.OpUpdate, Relation: childRel, New: child(text("7"), text("1"), unchanged)},
		// A key-only table: the update has nothing to set, only to insert.
		{Op: change.OpUpdate, Relation: parentRel, New: []change.Value{text("2")}},
		{Op: change.OpUpdate, Relation: parentRel, New: []change.Value{text("8")}},
	}
	// 7 is missing and kept a value only the destination could have had:
	// it stays missing.
	want := "1/2/one!,2/2/two!,4/2/four,5//five,6/1/six,9/2/nine"
	var counts map[change.TableName]change.Counts
	apply1 := func(cfg apply.Config, changes []*change.Change) (*pgx.Conn, *apply.Applier, error) {
		dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
		pgtest.Exec(t, dst, fkDDL+`;
			INSERT INTO parent VALUES (1), (2);
			INSERT INTO child VALUES (1, 1, 'one'), (2, 1, 'two'), (3, 1, 'three'), (4, 1, 'four')`)
		conn := connect(t, dst)
		a, err := apply.New(ctx, conn, cfg)
		require.NoError(t, err)
		require.NoError(t, a.Begin(ctx))
		for _, c := range changes {
			if err := a.Apply(ctx, c); err != nil {
				return conn, a, err
			}
		}
		counts, err = a.Commit(ctx, 0x100, 1)
		return conn, a, err
	}
	check := func(conn *pgx.Conn, want string) {
		t.Helper()
		var got string
		require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(format('%s/%s/%s', id, parent_id, note), ',' ORDER BY id) FROM child`).Scan(&got))
		require.Equal(t, want, got)
		require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(id::text, ',' ORDER BY id) FROM parent`).Scan(&got))
		require.Equal(t, "1,2,8", got)
	}
	cfg := apply.Config{MirrorUID: "m", Mappings: mappings(), RowStatementsUpTo: rowsUpTo}
	if rowsUpTo < 0 {
		// Staged, the new rows at keys without a row go by COPY; without
		// the insert of key 2, which the destination has, that applies.
		conn, _, err := apply1(cfg, append(changes[:2:2], changes[3:]...))
		require.NoError(t, err)
		check(conn, "1/2/one!,2/1/two,4/2/four,5//five,6/1/six,9/2/nine")
		// With it, the COPY meets the row: the batch must be applied again
		// in order, where the insert is an upsert.
		_, a, err := apply1(cfg, changes)
		var conflict *apply.OrderConflictError
		require.ErrorAs(t, err, &conflict)
		require.NoError(t, a.Rollback(ctx))
		cfg.InOrder = map[change.TableName]bool{childRel.Table: true}
	}
	conn, _, err := apply1(cfg, changes)
	require.NoError(t, err)
	require.Equal(t, change.Counts{Inserted: 3, Updated: 5, Deleted: 1}, counts[change.TableName{Schema: "public", Name: "child"}])
	check(conn, want)
}

// TestStagingTypes: staging columns take the destination's types without
// their domain constraints (deletes and unchanged values stage NULLs) and
// with their collations (keys compare as the primary key's index does).
func TestStagingTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE DOMAIN pos AS int NOT NULL CHECK (VALUE > 0);
		CREATE DOMAIN pos2 AS pos;
		CREATE TABLE public.child (id text COLLATE "C" PRIMARY KEY, parent_id pos2, note varchar(20));
		INSERT INTO child VALUES ('a', 1, 'keep'), ('b', 2, 'gone')`)
	rel := &change.Relation{ID: 2, Table: childRel.Table, ReplicaIdentity: change.IdentityDefault, Columns: childRel.Columns}
	conn := connect(t, dst)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()[1:]})
	require.NoError(t, err)
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: rel, New: []change.Value{text("a"), text("3"), unchanged}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpDelete, Relation: rel, Old: []change.Value{text("b"), null, null}, OldKeyOnly: true}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: rel, New: []change.Value{text("c"), text("4"), text("new")}}))
	_, err = a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)
	var got string
	require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(format('%s/%s/%s', id, parent_id, note), ',' ORDER BY id) FROM child`).Scan(&got))
	require.Equal(t, "a/3/keep,c/4/new", got)

	// The domain's constraints still hold for what reaches the table.
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: rel, New: []change.Value{text("a"), text("-1"), unchanged}}))
	_, err = a.Commit(ctx, 0x200, 2)
	require.ErrorContains(t, err, "pos")
	require.NoError(t, a.Rollback(ctx))
}

// TestCommitWAL: the session commits without waiting for the WAL flush,
// and Commit reads where the destination's WAL stands right after it.
func TestCommitWAL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, fkDDL)
	conn := connect(t, dst)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()})
	require.NoError(t, err)
	commit, flushed := a.LastCommitWAL()
	require.Zero(t, commit)
	require.Zero(t, flushed)
	var setting string
	require.NoError(t, conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting))
	require.Equal(t, "off", setting)

	var before string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before))
	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: parentRel, New: []change.Value{text("1")}}))
	require.NoError(t, a.SetTablePositions(ctx, map[change.TableName]change.LSN{{Schema: "public", Name: "parent"}: 0x50}, nil))
	_, err = a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)
	commit, flushed = a.LastCommitWAL()
	start, err := change.ParseLSN(before)
	require.NoError(t, err)
	require.Greater(t, commit, start)
	require.LessOrEqual(t, flushed, commit)
	// The batch and its positions are committed.
	lsn, batch, found, err := positions.Applied(ctx, conn, "m")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, change.LSN(0x100), lsn)
	require.Equal(t, int64(1), batch)
	tables, _, err := positions.Tables(ctx, conn, "m", []change.TableName{{Schema: "public", Name: "parent"}})
	require.NoError(t, err)
	require.Equal(t, map[change.TableName]change.LSN{{Schema: "public", Name: "parent"}: 0x50}, tables)

	// A rolled back batch leaves nothing and keeps the last positions.
	require.NoError(t, a.Begin(ctx))
	require.True(t, a.InBatch())
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: parentRel, New: []change.Value{text("2")}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("2"), text("2"), null}}))
	require.NoError(t, a.Rollback(ctx))
	require.False(t, a.InBatch())
	c2, f2 := a.LastCommitWAL()
	require.Equal(t, commit, c2)
	require.Equal(t, flushed, f2)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM parent) + (SELECT count(*) FROM child)`).Scan(&n))
	require.Equal(t, 1, n)
}

// TestCommitFails: a deferred foreign key fails the COMMIT itself; the
// error is typed, the batch is closed and left nothing, and the applier
// goes on.
func TestCommitFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectUnprivileged(t, `CREATE TABLE public.parent (id int PRIMARY KEY);
		CREATE TABLE public.child (id int PRIMARY KEY, parent_id int REFERENCES public.parent DEFERRABLE INITIALLY DEFERRED, note text)`)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()})
	require.NoError(t, err)

	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("1"), text("9"), null}}))
	_, err = a.Commit(ctx, 0x100, 1)
	require.ErrorIs(t, err, apply.ErrForeignKeyViolation)
	require.False(t, a.InBatch())
	require.NoError(t, a.Rollback(ctx))
	commit, _ := a.LastCommitWAL()
	require.Zero(t, commit)

	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: childRel, New: []change.Value{text("1"), text("9"), null}}))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: parentRel, New: []change.Value{text("9")}}))
	_, err = a.Commit(ctx, 0x200, 2)
	require.NoError(t, err)
	commit, _ = a.LastCommitWAL()
	require.NotZero(t, commit)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM child`).Scan(&n))
	require.Equal(t, 1, n)
	lsn, _, _, err := positions.Applied(ctx, conn, "m")
	require.NoError(t, err)
	require.Equal(t, change.LSN(0x200), lsn)
}

// connectUnprivileged creates a destination database with ddl and connects
// to it as a new role that may use its tables but is no superuser (so it may
// not set session_replication_role).
func connectUnprivileged(t *testing.T, ddl string) *pgx.Conn {
	t.Helper()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := fmt.Sprintf("applier_%d_%d", os.Getpid(), seq.Add(1))
	pgtest.Exec(t, dst, ddl+`;
		CREATE ROLE `+role+` LOGIN PASSWORD 'pw';
		GRANT CREATE ON DATABASE `+pgx.Identifier{dbName(t, dst)}.Sanitize()+` TO `+role+`;
		GRANT ALL ON ALL TABLES IN SCHEMA public TO `+role)
	t.Cleanup(func() {
		pgtest.Exec(t, dst, `DROP OWNED BY `+role+` CASCADE; DROP ROLE `+role)
	})
	u, err := url.Parse(dst)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "pw")
	return connect(t, u.String())
}

// TestUniqueOnAPartitionKeepsOrder: a unique index that only a partition
// of the destination table has is seen too. Rows that swap a unique value
// through a temporary one within a batch fail the folded statements with an
// OrderConflictError naming the table (and leave nothing behind); with the
// table in Config.InOrder the same batch applies.
func TestUniqueOnAPartitionKeepsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.acct (id int PRIMARY KEY, email text) PARTITION BY RANGE (id);
		CREATE TABLE public.acct_low PARTITION OF public.acct FOR VALUES FROM (0) TO (1000);
		CREATE UNIQUE INDEX ON public.acct_low (email)`)
	rel := &change.Relation{ID: 7, Table: change.TableName{Schema: "public", Name: "acct"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true}, {Name: "email"}}}
	conn := connect(t, dst)
	cfg := apply.Config{MirrorUID: "m", Mappings: []change.Mapping{{Source: rel.Table, Destination: rel.Table}}}
	row := func(id, email string) []change.Value { return []change.Value{text(id), text(email)} }
	var inserts []*change.Change
	for i := 1; i <= 20; i++ {
		inserts = append(inserts, &change.Change{Op: change.OpInsert, Relation: rel, New: row(fmt.Sprint(i), fmt.Sprint("e", i))})
	}
	folded, err := apply.New(ctx, conn, cfg)
	require.NoError(t, err)
	require.NoError(t, applyBatch(t, folded, 1, inserts))
	// 1 and 2 swap their emails through 'tmp'; 3 hands its email to a new
	// row before it is deleted.
	swaps := []*change.Change{
		{Op: change.OpUpdate, Relation: rel, New: row("1", "tmp")},
		{Op: change.OpUpdate, Relation: rel, New: row("2", "e1")},
		{Op: change.OpUpdate, Relation: rel, New: row("1", "e2")},
		{Op: change.OpUpdate, Relation: rel, New: row("3", "old3")},
		{Op: change.OpInsert, Relation: rel, New: row("30", "e3")},
		{Op: change.OpDelete, Relation: rel, Old: []change.Value{text("3"), null}, OldKeyOnly: true},
	}
	applyAgainInOrder(t, conn, cfg, folded, rel.Table, 2, swaps)
	var got string
	require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(id || '=' || email, ' ' ORDER BY id) FROM acct WHERE id IN (1, 2, 3, 30)`).Scan(&got))
	require.Equal(t, "1=e2 2=e1 30=e3", got)
}

// TestSelfReferenceWithForeignKeysChecked: a destination user that may not
// set session_replication_role gets foreign keys checked. In a
// self-referencing table, a row updated to point at a row inserted earlier
// in the same chunk fails when folded (the set-based UPDATE runs before the
// INSERT): an OrderConflictError, still a foreign key violation; in order
// the batch applies.
func TestSelfReferenceWithForeignKeysChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := connectUnprivileged(t, `CREATE TABLE public.node (id int PRIMARY KEY, parent int REFERENCES public.node)`)
	rel := &change.Relation{ID: 8, Table: change.TableName{Schema: "public", Name: "node"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true}, {Name: "parent"}}}
	cfg := apply.Config{MirrorUID: "m", Mappings: []change.Mapping{{Source: rel.Table, Destination: rel.Table}}}
	node := func(id int, parent change.Value) []change.Value { return []change.Value{text(fmt.Sprint(id)), parent} }
	folded, err := apply.New(ctx, conn, cfg)
	require.NoError(t, err)
	require.NoError(t, applyBatch(t, folded, 1, []*change.Change{
		{Op: change.OpInsert, Relation: rel, New: node(1, null)},
		{Op: change.OpInsert, Relation: rel, New: node(2, text("1"))},
	}))
	// More keys than the small-chunk row statements take, so that the
	// chunk goes through the set-based statements.
	var changes []*change.Change
	for id := 10; id < 30; id++ {
		changes = append(changes, &change.Change{Op: change.OpInsert, Relation: rel, New: node(id, text("1"))})
	}
	changes = append(changes,
		&change.Change{Op: change.OpInsert, Relation: rel, New: node(3, text("1"))},
		&change.Change{Op: change.OpUpdate, Relation: rel, New: node(2, text("3"))})
	err = applyAgainInOrder(t, conn, cfg, folded, rel.Table, 2, changes)
	require.ErrorIs(t, err, apply.ErrForeignKeyViolation)
	var parent int
	require.NoError(t, conn.QueryRow(ctx, `SELECT parent FROM node WHERE id = 2`).Scan(&parent))
	require.Equal(t, 3, parent)
}

// applyBatch applies changes as one batch ending at lsn and returns the
// first error of Apply or Commit (the batch is then left open for
// Rollback).
func applyBatch(t *testing.T, a *apply.Applier, lsn change.LSN, changes []*change.Change) error {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, a.Begin(ctx))
	for _, c := range changes {
		if err := a.Apply(ctx, c); err != nil {
			return err
		}
	}
	_, err := a.Commit(ctx, lsn, int64(lsn))
	return err
}

// TestNewRowsByCopy: a chunk of nothing but new rows goes by COPY into the
// table; a key deleted and inserted again in the chunk is new but its row
// is still on the destination, so that chunk takes the staging path and
// applies without a conflict. A new row the destination already has fails
// the COPY with an OrderConflictError.
func TestNewRowsByCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.child (id int PRIMARY KEY, parent_id int, note text);
		INSERT INTO public.child SELECT g, 0, 'old' FROM generate_series(1, 10) g`)
	conn := connect(t, dst)
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: mappings()})
	require.NoError(t, err)
	row := func(id int, note string) []change.Value {
		return []change.Value{text(fmt.Sprint(id)), text("1"), text(note)}
	}
	changes := []*change.Change{
		{Op: change.OpDelete, Relation: childRel, Old: []change.Value{text("5"), null, null}, OldKeyOnly: true},
		{Op: change.OpInsert, Relation: childRel, New: row(5, "again")},
	}
	for id := 100; id < 120; id++ {
		changes = append(changes, &change.Change{Op: change.OpInsert, Relation: childRel, New: row(id, "new")})
	}
	require.NoError(t, applyBatch(t, a, 1, changes))
	var got string
	require.NoError(t, conn.QueryRow(ctx, `SELECT note || count(*) FROM child WHERE id = 5 OR id >= 100 GROUP BY note ORDER BY note`).Scan(&got))
	require.Equal(t, "again1", got)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM child WHERE note = 'new'`).Scan(&n))
	require.Equal(t, 20, n)

	// Rows the destination has, sent as new (it was filled after the slot
	// was created): the COPY meets them.
	changes = changes[:0]
	for id := 1; id <= 10; id++ {
		changes = append(changes, &change.Change{Op: change.OpInsert, Relation: childRel, New: row(id+200, "x")})
	}
	changes = append(changes, &change.Change{Op: change.OpInsert, Relation: childRel, New: row(1, "dup")})
	err = applyBatch(t, a, 2, changes)
	var conflict *apply.OrderConflictError
	require.ErrorAs(t, err, &conflict)
	require.NoError(t, a.Rollback(ctx))
}

// applyAgainInOrder applies changes with the folding applier a and expects
// an OrderConflictError naming table (returned, for more assertions); it
// rolls the batch back and applies the same changes with a new applier on
// conn that has table in Config.InOrder, which must succeed.
func applyAgainInOrder(t *testing.T, conn *pgx.Conn, cfg apply.Config, a *apply.Applier, table change.TableName, lsn change.LSN, changes []*change.Change) error {
	t.Helper()
	ctx := context.Background()
	err := applyBatch(t, a, lsn, changes)
	var conflict *apply.OrderConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, table, conflict.Table)
	require.NoError(t, a.Rollback(ctx))
	cfg.InOrder = map[change.TableName]bool{table: true}
	inOrder, ierr := apply.New(ctx, conn, cfg)
	require.NoError(t, ierr)
	require.NoError(t, applyBatch(t, inOrder, lsn, changes))
	return err
}
