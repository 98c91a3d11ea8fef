package ddl

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	// Logical decoding by SQL function reads only flushed WAL.
	cfg.RuntimeParams["synchronous_commit"] = "on"
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { t.Logf("notice: %s: %s", n.Severity, n.Message) }
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// messages returns the pgmirror_ddl messages the source wrote since the
// slot was created, decoded, in order (read with pgoutput, as a mirror).
func messages(t *testing.T, ctx context.Context, src *pgx.Conn, slot, key string) []Message {
	t.Helper()
	datas := slotMessages(t, ctx, src, slot)
	var out []Message
	var xid uint32
	for _, d := range datas {
		if d[0] == 'B' {
			xid = binary.BigEndian.Uint32(d[17:21])
		}
		if d[0] != 'M' {
			continue
		}
		require.Equal(t, byte(1), d[1], "transactional flag")
		rest := d[10:]
		prefix, content, ok := strings.Cut(string(rest), "\x00")
		require.True(t, ok)
		if prefix != change.SchemaMessagePrefix {
			continue
		}
		msg, err := Open([]byte(content[4:]), key, xid)
		require.NoError(t, err)
		_, err = Open([]byte(content[4:]), key, xid+1)
		require.ErrorIs(t, err, ErrUnsigned, "a message of another transaction")
		_, err = Open([]byte(content[4:]), key+"x", xid)
		require.ErrorIs(t, err, ErrUnsigned, "another key")
		out = append(out, msg)
	}
	return out
}

// slotMessages reads the pgoutput messages of slot.
func slotMessages(t *testing.T, ctx context.Context, src *pgx.Conn, slot string) [][]byte {
	t.Helper()
	rows, err := src.Query(ctx, `SELECT data FROM pg_logical_slot_get_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'ddl_test_pub', 'messages', 'true')`, slot)
	require.NoError(t, err)
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	return datas
}

// newSlot creates a pgoutput slot with a name unique in the cluster.
func newSlot(t *testing.T, ctx context.Context, src *pgx.Conn) string {
	t.Helper()
	slot := fmt.Sprintf("ddl_test_%d", slotSeq.Add(1))
	_, err := src.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	require.NoError(t, err)
	return slot
}

var slotSeq atomic.Int64

// TestTriggerAndReconcile installs the trigger on a source database, runs
// DDL there, reads the messages it wrote through a pgoutput slot, and
// reconciles a destination table with each: the destination ends with the
// source's indexes, constraints, defaults and NOT NULL flags, and a second
// reconcile of the same message changes nothing.
func TestTriggerAndReconcile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	src, dst := connect(t, srcURL), connect(t, dstURL)
	table := `CREATE TABLE public.t (id int PRIMARY KEY, n int, v text, "Odd Col" text, skip text);`
	_, err := src.Exec(ctx, table+`CREATE PUBLICATION ddl_test_pub FOR TABLE public.t`)
	require.NoError(t, err)
	_, err = dst.Exec(ctx, `CREATE SCHEMA other; CREATE TABLE other.t2 (id int PRIMARY KEY, n int, v text, "Odd Col" text);
		COMMENT ON TABLE other.t2 IS 'Created by pgmirror for mirror m'`)
	require.NoError(t, err)
	require.NoError(t, Install(ctx, src))
	require.NoError(t, Install(ctx, src), "install is idempotent")
	ok, current, err := Installed(ctx, src)
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, current)
	// Functions of an older pgmirror: installed, not current, until
	// installed again.
	_, err = src.Exec(ctx, `COMMENT ON FUNCTION _pgmirror.pgmirror_ddl_table_state(oid, text) IS NULL`)
	require.NoError(t, err)
	ok, current, err = Installed(ctx, src)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, current)
	require.NoError(t, Install(ctx, src))
	_, current, err = Installed(ctx, src)
	require.NoError(t, err)
	require.True(t, current)
	slot := newSlot(t, ctx, src)
	key, err := ReadKey(ctx, src)
	require.NoError(t, err)

	m := change.Mapping{Source: change.TableName{Schema: "public", Name: "t"}, Destination: change.TableName{Schema: "other", Name: "t2"}, ExcludeColumns: []string{"skip"}}
	apply := func() []string {
		t.Helper()
		var applied []string
		for _, msg := range messages(t, ctx, src, slot, key) {
			require.True(t, msg.Concerns(m), "%+v", msg)
			tx, err := dst.Begin(ctx)
			require.NoError(t, err)
			res, err := Reconcile(ctx, tx.Conn(), m, msg)
			require.NoError(t, err)
			require.Empty(t, res.Warnings)
			applied = append(applied, res.Applied...)
			again, _, err := Plan(ctx, tx.Conn(), m, msg)
			require.NoError(t, err)
			require.Empty(t, again, "a second reconcile of %s changes nothing", msg.Tag)
			require.NoError(t, tx.Commit(ctx))
		}
		return applied
	}

	_, err = src.Exec(ctx, `CREATE INDEX t_n ON public.t (n) WHERE n > 0;
		CREATE UNIQUE INDEX "T v" ON public.t (lower(v));
		ALTER TABLE public.t ADD CONSTRAINT t_n_pos CHECK (n > 0) NOT VALID, ADD CONSTRAINT t_v_key UNIQUE (v, n),
			ALTER COLUMN v SET DEFAULT 'x', ALTER COLUMN "Odd Col" SET NOT NULL, ALTER COLUMN skip SET NOT NULL`)
	require.NoError(t, err)
	applied := apply()
	require.Equal(t, []string{
		`CREATE INDEX "t_n" ON "other"."t2" USING btree (n) WHERE (n > 0)`,
		`CREATE UNIQUE INDEX "T v" ON "other"."t2" USING btree (lower(v))`,
		`ALTER TABLE "other"."t2" ADD CONSTRAINT "t_n_pos" CHECK ((n > 0)) NOT VALID`,
		`ALTER TABLE "other"."t2" ADD CONSTRAINT "t_v_key" UNIQUE (v, n)`,
		`ALTER TABLE "other"."t2" ALTER COLUMN "v" SET DEFAULT 'x'::text`,
		`ALTER TABLE "other"."t2" ALTER COLUMN "Odd Col" SET NOT NULL`,
	}, applied)

	_, err = src.Exec(ctx, `ALTER INDEX public.t_n RENAME TO t_n2;
		ALTER TABLE public.t VALIDATE CONSTRAINT t_n_pos;
		ALTER TABLE public.t RENAME CONSTRAINT t_v_key TO t_v_uniq;
		ALTER TABLE public.t ALTER COLUMN v DROP DEFAULT, ALTER COLUMN "Odd Col" DROP NOT NULL;
		DROP INDEX public."T v";
		ALTER TABLE public.t DROP CONSTRAINT t_n_pos`)
	require.NoError(t, err)
	applied = apply()
	require.Equal(t, []string{
		`ALTER INDEX "other"."t_n" RENAME TO "t_n2"`,
		`ALTER TABLE "other"."t2" VALIDATE CONSTRAINT "t_n_pos"`,
		`ALTER TABLE "other"."t2" RENAME CONSTRAINT "t_v_key" TO "t_v_uniq"`,
		`ALTER TABLE "other"."t2" ALTER COLUMN "v" DROP DEFAULT`,
		`ALTER TABLE "other"."t2" ALTER COLUMN "Odd Col" DROP NOT NULL`,
		`DROP INDEX "other"."T v"`,
		`ALTER TABLE "other"."t2" DROP CONSTRAINT "t_n_pos"`,
	}, applied)

	var indexes, constraints string
	require.NoError(t, dst.QueryRow(ctx, `SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'other' AND tablename = 't2'`).Scan(&indexes))
	require.Equal(t, "t2_pkey,t_n2,t_v_uniq", indexes)
	require.NoError(t, dst.QueryRow(ctx, `SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint WHERE conrelid = 'other.t2'::regclass`).Scan(&constraints))
	require.Equal(t, "t2_pkey,t_v_uniq", constraints)

	require.NoError(t, Remove(ctx, src))
	ok, current, err = Installed(ctx, src)
	require.NoError(t, err)
	require.False(t, ok)
	require.False(t, current)
	_, err = src.Exec(ctx, `CREATE INDEX t_v ON public.t (v)`)
	require.NoError(t, err)
	require.Empty(t, messages(t, ctx, src, slot, key), "no message once removed")
}

// TestTriggerLeavesTemporaryTables: DDL on temporary tables writes no
// message.
func TestTriggerLeavesTemporaryTables(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := connect(t, pgtest.NewDatabase(t, pgtest.SourceCluster(t)))
	require.NoError(t, Install(ctx, src))
	_, err := src.Exec(ctx, `CREATE PUBLICATION ddl_test_pub FOR ALL TABLES`)
	require.NoError(t, err)
	slot := newSlot(t, ctx, src)
	key, err := ReadKey(ctx, src)
	require.NoError(t, err)
	_, err = src.Exec(ctx, `CREATE TEMP TABLE tmp (a int); CREATE INDEX ON tmp (a); ALTER TABLE tmp ADD CHECK (a > 0)`)
	require.NoError(t, err)
	require.Empty(t, messages(t, ctx, src, slot, key))
}

// TestCheckPermitted: a user that is not a superuser may not install the
// trigger, and the error says what is needed.
func TestCheckPermitted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	role := fmt.Sprintf("ddl_plain_%d", time.Now().UnixNano()%1_000_000_000)
	pgtest.Exec(t, url, `CREATE ROLE `+role+` LOGIN PASSWORD 'pw'`)
	t.Cleanup(func() { pgtest.Exec(t, url, `DROP ROLE IF EXISTS `+role) })
	cfg := pgtest.ConnConfig(t, url)
	cfg.User, cfg.Password = role, "pw"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	err = Install(ctx, conn)
	require.ErrorIs(t, err, ErrNotPermitted)
	require.Contains(t, err.Error(), "superuser")
}

// TestForgedMessage: a message with pgmirror's prefix written by a user
// through pg_logical_emit_message (not by the trigger) is not signed and
// is refused.
func TestForgedMessage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := connect(t, pgtest.NewDatabase(t, pgtest.SourceCluster(t)))
	require.NoError(t, Install(ctx, src))
	_, err := src.Exec(ctx, `CREATE TABLE public.t (id int PRIMARY KEY); CREATE PUBLICATION ddl_test_pub FOR ALL TABLES`)
	require.NoError(t, err)
	slot := newSlot(t, ctx, src)
	forged := `{"v": 1, "kind": "state", "schema": "public", "table": "t", "xid": 0, "indexes": [{"name": "x", "def": "CREATE INDEX x ON public.t USING btree (id); DROP TABLE t", "prefix": "CREATE INDEX x ON public.t USING "}]}`
	_, err = src.Exec(ctx, `SELECT pg_logical_emit_message(true, 'pgmirror_ddl', $1)`, strings.Repeat("0", 64)+forged)
	require.NoError(t, err)
	datas := slotMessages(t, ctx, src, slot)
	key, err := ReadKey(ctx, src)
	require.NoError(t, err)
	found := false
	for _, d := range datas {
		if d[0] == 'M' {
			_, content, _ := strings.Cut(string(d[10:]), "\x00")
			_, err := Open([]byte(content[4:]), key, 0)
			require.ErrorIs(t, err, ErrUnsigned)
			found = true
		}
	}
	require.True(t, found, "the forged message reached the slot")
}
