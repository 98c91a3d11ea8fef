package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// scSourceSQL is the table the schema change tests alter: n is the column
// the write load uses, left alone by every migration.
const scSourceSQL = `CREATE TABLE public.sc (
	id bigserial PRIMARY KEY,
	n int NOT NULL DEFAULT 0,
	a int,
	b text NOT NULL DEFAULT 'b',
	c int,
	d numeric(10,2),
	g varchar(10),
	p int DEFAULT 1);
INSERT INTO public.sc (n, a, b, c, d, g) SELECT i, i, 'b' || i, i * 2, i / 7.0, 'g' || (i % 100) FROM generate_series(1, 300) i`

// scLoad writes to public.sc until ended: inserts, updates of n and
// deletes, one small transaction at a time, going on through the short
// waits the migrations' locks make.
type scLoad struct {
	committed atomic.Int64
	stop      chan struct{}
	done      chan struct{}
}

func startSCLoad(dbURL string, seed uint64) *scLoad {
	l := &scLoad{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		rng := rand.New(rand.NewPCG(seed, 3))
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				k := rng.IntN(1000)
				if _, err := tx.Exec(ctx, `INSERT INTO public.sc (n) VALUES ($1)`, k); err != nil {
					return err
				}
				switch rng.IntN(3) {
				case 0:
					_, err := tx.Exec(ctx, `UPDATE public.sc SET n = n + 1 WHERE id = (SELECT max(id) - $1 % 50 FROM public.sc)`, k)
					return err
				case 1:
					_, err := tx.Exec(ctx, `DELETE FROM public.sc WHERE id = (SELECT min(id) + $1 % 50 FROM public.sc)`, k)
					return err
				}
				return nil
			})
			cancel()
			if err == nil {
				l.committed.Add(1)
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	return l
}

func (l *scLoad) end() int64 {
	close(l.stop)
	<-l.done
	return l.committed.Load()
}

// scColumns lists a table's columns with their types, from
// information_schema, in name order.
func scColumns(t *testing.T, dbURL string) string {
	t.Helper()
	var cols string
	queryOne(t, dbURL, &cols, `SELECT string_agg(column_name || ' ' || data_type
			|| coalesce('(' || character_maximum_length || ')', '')
			|| coalesce('(' || numeric_precision || ',' || numeric_scale || ')', ''), ', ' ORDER BY column_name)
		FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'sc'`)
	return cols
}

// scColumnNames lists the source table's column names in attnum order, for
// the row digest.
func scColumnNames(t *testing.T, dbURL string) string {
	t.Helper()
	var cols string
	queryOne(t, dbURL, &cols, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'public.sc'::regclass AND attnum > 0 AND NOT attisdropped`)
	return cols
}

// migrateUnderLoad runs migration on the source while the write load runs
// before, during and after it, then stops the load and waits until the
// destination has the source's columns and rows.
func migrateUnderLoad(t *testing.T, src, dst, migration string, seed uint64) {
	t.Helper()
	l := startSCLoad(src, seed)
	time.Sleep(300 * time.Millisecond)
	exec1(t, src, migration)
	time.Sleep(time.Second)
	if n := l.end(); n == 0 {
		t.Fatalf("the write load committed nothing around %q", migration)
	}
	want := scColumns(t, src)
	deadline := time.Now().Add(90 * time.Second)
	for scColumns(t, dst) != want {
		if time.Now().After(deadline) {
			t.Fatalf("after %q the destination's columns are\n%s\nthe source's\n%s", migration, scColumns(t, dst), want)
		}
		time.Sleep(250 * time.Millisecond)
	}
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 90*time.Second)
}

// TestSchemaChangesApply runs the application's migrations on a mapped
// table under a write load, one by one and then several in one
// transaction, and checks after each that the destination has the
// source's columns (names and types) and rows, that each change was
// applied at its position ("Schema change applied", counted in /metrics),
// that the changes whose values the stream does not carry resynced the
// table, and that the run never restarted in text mode nor failed.
func TestSchemaChangesApply(t *testing.T) {
	t.Parallel()
	catalog, src, dst, s := newEnv(t, scSourceSQL)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "sc", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{map[string]any{"source_schema": "public", "source_table": "sc", "destination_schema": "public", "destination_table": "sc"}},
	}, 201, nil)
	s.dumpOnFailure("sc")
	s.waitStatus("sc", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 60*time.Second)

	steps := []struct {
		name, sql string
		resync    bool
	}{
		{"rename", `ALTER TABLE public.sc RENAME COLUMN b TO b2; UPDATE public.sc SET b2 = b2 || '!' WHERE id % 10 = 0`, false},
		{"drop", `ALTER TABLE public.sc DROP COLUMN c`, false},
		{"add with a constant default", `ALTER TABLE public.sc ADD COLUMN e int NOT NULL DEFAULT 7`, false},
		{"add with a volatile default", `ALTER TABLE public.sc ADD COLUMN f double precision DEFAULT random()`, true},
		{"type change with USING", `ALTER TABLE public.sc ALTER COLUMN a TYPE text USING 'v' || a`, true},
		{"numeric scale change", `ALTER TABLE public.sc ALTER COLUMN d TYPE numeric(12,4)`, true},
		{"varchar widened", `ALTER TABLE public.sc ALTER COLUMN g TYPE varchar(20)`, false},
		{"type change whose default changes along", `ALTER TABLE public.sc ALTER COLUMN p DROP DEFAULT,
			ALTER COLUMN p TYPE boolean USING p > 0, ALTER COLUMN p SET DEFAULT true`, true},
		{"add of a new enum type", `CREATE TYPE public.mood AS ENUM ('ok', 'meh');
			ALTER TABLE public.sc ADD COLUMN m public.mood;
			UPDATE public.sc SET m = 'meh' WHERE id % 3 = 0`, false},
		{"several in one transaction", `BEGIN;
			ALTER TABLE public.sc RENAME COLUMN b2 TO b3;
			ALTER TABLE public.sc ADD COLUMN h text DEFAULT 'x';
			ALTER TABLE public.sc DROP COLUMN e;
			ALTER TABLE public.sc ALTER COLUMN g TYPE text;
			UPDATE public.sc SET h = 'y' || id WHERE id % 7 = 0;
			COMMIT`, false},
	}
	for i, step := range steps {
		resyncs := s.countLogs("sc", "Table resync started")
		migrateUnderLoad(t, src, dst, step.sql, uint64(i+1))
		if got := s.countLogs("sc", "Table resync started") > resyncs; got != step.resync {
			t.Errorf("%s: resync started = %v, want %v", step.name, got, step.resync)
		}
		s.waitStatus("sc", "running", 60*time.Second)
	}
	// The row digest above compares text forms; the destination's types
	// are the source's (scColumns), so e.g. a is text 'v...' on both.

	// A migration while pgmirror is down: the next run finds the known
	// columns on the destination, streams in binary from before the
	// migration, and applies it at its position.
	before := s.output.String()
	s.kill()
	l := startSCLoad(src, 99)
	time.Sleep(300 * time.Millisecond)
	exec1(t, src, `ALTER TABLE public.sc RENAME COLUMN b3 TO b4; ALTER TABLE public.sc DROP COLUMN h; ALTER TABLE public.sc ADD COLUMN k int DEFAULT 5`)
	time.Sleep(500 * time.Millisecond)
	l.end()
	s = startService(t, catalog)
	s.dumpOnFailure("sc")
	migrateUnderLoad(t, src, dst, `UPDATE public.sc SET k = 6 WHERE id % 4 = 0`, 100)
	s.waitStatus("sc", "running", 60*time.Second)

	var statements []string
	for _, e := range s.logsWith("sc", "Schema change applied") {
		if e.Level != "INFO" || e.Details["table"] != "public.sc" {
			t.Errorf("Schema change applied entry %s %v", e.Level, e.Details)
		}
		st, _ := e.Details["statement"].(string)
		statements = append(statements, st)
	}
	// The changes that resync the table may reach the destination with
	// the copy instead (it starts as soon as it is asked for, and takes
	// the source's columns along): they need not be logged here. (Their
	// statements run before the resync is asked for, so one that failed,
	// such as a type change meeting a default of the old type, would show
	// as an ERROR entry below.)
	joined := strings.ReplaceAll(strings.Join(statements, "\n"), `"`, "")
	// A type the stream needs may also be created by a run's start
	// (the types of every table are brought up then, before a copy or
	// after a restart), logged with the schema sync: either way it is
	// there before the rows that use it.
	var synced []string
	for _, e := range s.logsWith("sc", "Schema sync completed") {
		if list, ok := e.Details["ddl_statements"].([]any); ok {
			for _, st := range list {
				if str, ok := st.(string); ok {
					synced = append(synced, str)
				}
			}
		}
	}
	createType := `CREATE TYPE public.mood AS ENUM ('ok', 'meh')`
	if !strings.Contains(joined, createType) && !strings.Contains(strings.ReplaceAll(strings.Join(synced, "\n"), `"`, ""), createType) {
		t.Errorf("no Schema change applied or Schema sync completed with %q among:\n%s\n%s", createType, joined, strings.Join(synced, "\n"))
	}
	for _, want := range []string{
		`ALTER TABLE public.sc RENAME COLUMN b TO b2`, `DROP COLUMN c`, `ADD COLUMN e integer DEFAULT '7'::integer NOT NULL`,
		`ALTER COLUMN g TYPE character varying(20) USING g::character varying(20)`,
		`ADD COLUMN m public.mood`,
		`RENAME COLUMN b2 TO b3`, `ADD COLUMN h text DEFAULT 'x'::text`, `DROP COLUMN e`, `ALTER COLUMN g TYPE text USING g::text`,
		`RENAME COLUMN b3 TO b4`, `DROP COLUMN h`, `ADD COLUMN k integer DEFAULT '5'::integer`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no Schema change applied with %q among:\n%s", want, joined)
		}
	}
	// The counter is the process's: the restarted one counted the last
	// migration's statements.
	v, ok := metricValue(s.scrape(""), "pgmirror_schema_changes_applied_total", map[string]string{"mirror": "sc"})
	if !ok || v < 3 {
		t.Errorf("pgmirror_schema_changes_applied_total = %v (%v), want at least the 3 statements since the restart", v, ok)
	}
	out := before + s.output.String()
	for _, bad := range []string{"restarting the stream with its format decided again", "Source columns dropped or renamed", "binary=false"} {
		if strings.Contains(out, bad) {
			t.Errorf("the service logged %q", bad)
		}
	}
	if !strings.Contains(out, "binary=true") {
		t.Error("no CDC run started in binary")
	}
	s.noWarnings("sc")
}

// TestSchemaChangesWarn: under warn the destination's schema is left as
// it is for a rename and a drop (the old columns are kept, nullable; the
// new name arrives as a new column), each reported with a WARN, and the
// source's columns keep replicating.
func TestSchemaChangesWarn(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, scSourceSQL)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "scw", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "schema_changes": "warn",
		"table_mappings": []any{map[string]any{"source_schema": "public", "source_table": "sc", "destination_schema": "public", "destination_table": "sc"}},
	}, 201, nil)
	s.dumpOnFailure("scw")
	s.waitStatus("scw", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 60*time.Second)

	l := startSCLoad(src, 1)
	time.Sleep(300 * time.Millisecond)
	exec1(t, src, `ALTER TABLE public.sc RENAME COLUMN b TO b2; ALTER TABLE public.sc DROP COLUMN c`)
	time.Sleep(time.Second)
	l.end()
	// The columns left alone keep replicating. (The renamed column's new
	// name is added on the destination with NULL in older rows: that is
	// what warn leaves to the user.)
	waitEqual(t, src, dst, "public.sc", "public.sc", "id, n, a, d, g", 90*time.Second)
	e := s.waitLog("scw", "Schema change not applied", 30*time.Second, nil)
	if e.Level != "WARN" || e.Details["table"] != "public.sc" {
		t.Errorf("Schema change not applied entry %s %v", e.Level, e.Details)
	}
	// b has a default, so it stays NOT NULL: inserts fill it.
	var kept int64
	queryOne(t, dst, &kept, `SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'sc'
		AND column_name IN ('b', 'c')`)
	if kept != 2 {
		t.Errorf("the destination kept %d of the columns b and c, want 2 (columns: %s)", kept, scColumns(t, dst))
	}
	if n := s.countLogs("scw", "Schema change applied"); n != 0 {
		t.Errorf("%d Schema change applied entries under warn", n)
	}
}

// TestSchemaChangesStop: under stop the mirror pauses before the first
// change that would alter the destination's schema, with a log entry that
// says how to go on; the destination is left as it was. Changed by hand on
// the destination, the change is taken as done on resume; switched to apply
// and resumed, it continues from before the change and applies it.
func TestSchemaChangesStop(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, scSourceSQL)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "scs", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "schema_changes": "stop",
		"table_mappings": []any{map[string]any{"source_schema": "public", "source_table": "sc", "destination_schema": "public", "destination_table": "sc"}},
	}, 201, nil)
	s.dumpOnFailure("scs")
	s.waitStatus("scs", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 60*time.Second)

	l := startSCLoad(src, 2)
	time.Sleep(300 * time.Millisecond)
	exec1(t, src, `ALTER TABLE public.sc RENAME COLUMN b TO b2`)
	time.Sleep(time.Second)
	l.end()
	s.waitStatus("scs", "paused", 60*time.Second)
	e := s.waitLog("scs", "Mirror paused before a schema change", 10*time.Second, nil)
	action, _ := e.Details["action"].(string)
	if e.Level != "WARN" || e.Details["table"] != "public.sc" || !strings.Contains(fmt.Sprint(e.Details["changes"]), `"b" renamed to "b2"`) ||
		!strings.Contains(action, "PATCH /v1/mirrors/{name}") || !strings.Contains(action, "resume") {
		t.Errorf("Mirror paused before a schema change entry %s %v", e.Level, e.Details)
	}
	var hasB int64
	queryOne(t, dst, &hasB, `SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'sc' AND column_name = 'b'`)
	if hasB != 1 {
		t.Errorf("the destination lost column b while stopped: %s", scColumns(t, dst))
	}
	if m := s.mirror("scs"); m.Status != "paused" {
		t.Fatalf("status %s, want paused", m.Status)
	}

	// Fixed by hand on the destination: resumed, the mirror takes the
	// change as done and goes on, still under stop.
	exec1(t, dst, `ALTER TABLE public.sc RENAME COLUMN b TO b2`)
	s.mustDo("POST", "/v1/mirrors/scs/resume", nil, 200, nil)
	s.waitStatus("scs", "running", 60*time.Second)
	migrateUnderLoad(t, src, dst, `UPDATE public.sc SET b2 = b2 || '?' WHERE id % 5 = 0`, 3)
	if n := s.countLogs("scs", "Mirror paused before a schema change"); n != 1 {
		t.Errorf("%d pauses before a schema change, want 1 (the destination already had the change)", n)
	}

	// The next change stops it again; switched to apply and resumed, it
	// continues from before the change and applies it.
	l = startSCLoad(src, 4)
	time.Sleep(300 * time.Millisecond)
	exec1(t, src, `ALTER TABLE public.sc DROP COLUMN c`)
	time.Sleep(time.Second)
	l.end()
	s.waitStatus("scs", "paused", 60*time.Second)
	s.mustDo("PATCH", "/v1/mirrors/scs", map[string]any{"schema_changes": "apply"}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/scs/resume", nil, 200, nil)
	s.waitStatus("scs", "running", 60*time.Second)
	migrateUnderLoad(t, src, dst, `UPDATE public.sc SET b2 = b2 || '!' WHERE id % 5 = 1`, 5)
	e = s.waitLog("scs", "Schema change applied", 10*time.Second, nil)
	if st, _ := e.Details["statement"].(string); !strings.Contains(st, `DROP COLUMN "c"`) {
		t.Errorf("Schema change applied %v, want the drop of c", e.Details)
	}
	for _, e := range s.logs("scs", "level=ERROR") {
		t.Errorf("ERROR entry %q: %v", e.Message, e.Details)
	}
}

// TestSchemaChangesEnumLabel: a label added to an enum on the source that
// a mapped column uses reaches the destination (a run's start adds it to
// the destination's copy of the enum under apply too), so the rows that
// use it replicate.
func TestSchemaChangesEnumLabel(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TYPE public.level AS ENUM ('low', 'high');
		CREATE TABLE public.lv (id int PRIMARY KEY, l public.level);
		INSERT INTO public.lv SELECT i, 'low' FROM generate_series(1, 20) i`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "lv", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{map[string]any{"source_schema": "public", "source_table": "lv", "destination_schema": "public", "destination_table": "lv"}},
	}, 201, nil)
	s.dumpOnFailure("lv")
	s.waitStatus("lv", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.lv", "public.lv", "id, l", 60*time.Second)
	exec1(t, src, `ALTER TYPE public.level ADD VALUE 'mid' AFTER 'low'`)
	exec1(t, src, `UPDATE public.lv SET l = 'mid' WHERE id % 2 = 0; INSERT INTO public.lv VALUES (21, 'mid')`)
	waitEqual(t, src, dst, "public.lv", "public.lv", "id, l", 120*time.Second)
	s.waitStatus("lv", "running", 60*time.Second)
}

// tableColumns lists a table's columns with their types in attnum order.
func tableColumns(t *testing.T, dbURL, table string) string {
	t.Helper()
	var cols string
	queryOne(t, dbURL, &cols, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
	return cols
}

// TestSchemaChangesQuietTable migrates tables whose rows were not written
// since they were copied, so that the stream describes them for the first
// time after the change: the mirror knows their columns from the copy
// (initial snapshot, and a table resync beside CDC), and applies a rename
// and a drop as such instead of taking the renamed column for a new one.
func TestSchemaChangesQuietTable(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.q (id int PRIMARY KEY, v text NOT NULL, w int, x int NOT NULL);
		INSERT INTO public.q SELECT i, 'v' || i, i, i FROM generate_series(1, 200) i;
		CREATE TABLE public.r (id int PRIMARY KEY, v text NOT NULL, w int);
		INSERT INTO public.r SELECT i, 'r' || i, i FROM generate_series(1, 200) i`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "qt", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{
			map[string]any{"source_schema": "public", "source_table": "q", "destination_schema": "public", "destination_table": "q"},
			map[string]any{"source_schema": "public", "source_table": "r", "destination_schema": "public", "destination_table": "r"},
		},
	}, 201, nil)
	s.dumpOnFailure("qt")
	s.waitStatus("qt", "running", 60*time.Second)

	check := func(table, step string) {
		t.Helper()
		want := tableColumns(t, src, table)
		deadline := time.Now().Add(60 * time.Second)
		for tableColumns(t, dst, table) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: destination columns of %s are\n%s\nthe source's\n%s", step, table, tableColumns(t, dst, table), want)
			}
			time.Sleep(200 * time.Millisecond)
		}
		var cols string
		queryOne(t, src, &cols, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
		waitEqual(t, src, dst, table, table, cols, 60*time.Second)
	}

	// No row of q streamed since the snapshot: the first description of q
	// in the stream already has the new names.
	exec1(t, src, `ALTER TABLE public.q RENAME COLUMN v TO v2; ALTER TABLE public.q DROP COLUMN w;
		ALTER TABLE public.q RENAME COLUMN x TO x2; UPDATE public.q SET v2 = v2 || '!' WHERE id % 10 = 0`)
	check("public.q", "after the snapshot")

	// r copied again beside running CDC, then migrated before any of its
	// rows streamed.
	copies := s.countLogs("qt", "Table snapshot completed")
	s.mustDo("POST", "/v1/mirrors/qt/resync/public.r", nil, 200, nil)
	deadline := time.Now().Add(60 * time.Second)
	for s.countLogs("qt", "Table snapshot completed") == copies {
		if time.Now().After(deadline) {
			t.Fatal("the resync of public.r did not complete")
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.waitStatus("qt", "running", 60*time.Second)
	exec1(t, src, `ALTER TABLE public.r RENAME COLUMN v TO v2; ALTER TABLE public.r DROP COLUMN w; UPDATE public.r SET v2 = v2 || '?' WHERE id % 5 = 0`)
	check("public.r", "after the table resync")

	s.noWarnings("qt")
}

// tableShape lists a table's columns in attnum order with their types and
// NOT NULL, for comparing a destination table's shape with its source's.
func tableShape(t *testing.T, dbURL, table string) string {
	t.Helper()
	var cols string
	queryOne(t, dbURL, &cols, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || CASE WHEN attnotnull THEN ' not null' ELSE '' END, ', ' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
	return cols
}

// TestSchemaChangesResyncAfterMigration: a table whose source was migrated
// (a column renamed, one dropped, one added NOT NULL with a default) before
// the stream reached the change, and that is copied again then (here a
// table resync requested while paused; also a resync a type change asked
// for whose batch did not commit, or a table found in a mapped schema that
// changed before its first copy), gets the source's columns by attnum
// before its copy: the renamed column renamed, the dropped one dropped,
// the new one NOT NULL, rather than the new names added beside old
// columns that stay NULL for ever.
func TestSchemaChangesResyncAfterMigration(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, scSourceSQL)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "scr", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{map[string]any{"source_schema": "public", "source_table": "sc", "destination_schema": "public", "destination_table": "sc"}},
	}, 201, nil)
	s.dumpOnFailure("scr")
	s.waitStatus("scr", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 60*time.Second)

	l := startSCLoad(src, 11)
	time.Sleep(500 * time.Millisecond)
	s.mustDo("POST", "/v1/mirrors/scr/pause", nil, 200, nil)
	s.waitStatus("scr", "paused", 60*time.Second)
	exec1(t, src, `ALTER TABLE public.sc RENAME COLUMN a TO a2; ALTER TABLE public.sc DROP COLUMN c;
		ALTER TABLE public.sc ADD COLUMN e text NOT NULL DEFAULT 'e'; UPDATE public.sc SET a2 = -a2 WHERE id % 7 = 0`)
	s.mustDo("POST", "/v1/mirrors/scr/resync/public.sc", nil, 200, nil)
	s.mustDo("POST", "/v1/mirrors/scr/resume", nil, 200, nil)
	s.waitStatus("scr", "running", 60*time.Second)
	time.Sleep(time.Second)
	if n := l.end(); n == 0 {
		t.Fatal("the write load committed nothing")
	}
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 90*time.Second)
	want := tableShape(t, src, "public.sc")
	deadline := time.Now().Add(30 * time.Second)
	for tableShape(t, dst, "public.sc") != want {
		if time.Now().After(deadline) {
			t.Fatalf("destination columns of public.sc are\n%s\nthe source's\n%s", tableShape(t, dst, "public.sc"), want)
		}
		time.Sleep(200 * time.Millisecond)
	}
	applied := fmt.Sprint(s.logsWith("scr", "Schema change applied"))
	for _, stmt := range []string{`RENAME COLUMN "a" TO "a2"`, `DROP COLUMN "c"`} {
		if !strings.Contains(applied, stmt) {
			t.Errorf("no \"Schema change applied\" entry with %q: %s", stmt, applied)
		}
	}
	s.noWarnings("scr")
}

// primaryKeyOf returns the definition of a table's primary key.
func primaryKeyOf(t *testing.T, dbURL, table string) string {
	t.Helper()
	var def string
	queryOne(t, dbURL, &def, `SELECT coalesce((SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'), '')`, table)
	return def
}

// TestSchemaChangesPrimaryKey: the source's primary key widened (id to
// tenant, id) under a write load, then rows that share an id in other
// tenants: the destination's key follows at its position in the stream,
// so those rows land as rows of their own instead of being folded into one
// (the mirror stayed running without an error before, and diverged).
func TestSchemaChangesPrimaryKey(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, scSourceSQL+`;
		CREATE TABLE public.pk (id int PRIMARY KEY, tenant int NOT NULL, v text);
		INSERT INTO public.pk SELECT i, 1, 'v' || i FROM generate_series(1, 100) i`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "pk", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{
			map[string]any{"source_schema": "public", "source_table": "sc", "destination_schema": "public", "destination_table": "sc"},
			map[string]any{"source_schema": "public", "source_table": "pk", "destination_schema": "public", "destination_table": "pk"},
		},
	}, 201, nil)
	s.dumpOnFailure("pk")
	s.waitStatus("pk", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.pk", "public.pk", "id, tenant, v", 60*time.Second)

	l := startSCLoad(src, 21)
	time.Sleep(300 * time.Millisecond)
	exec1(t, src, `UPDATE public.pk SET v = v || '!' WHERE id % 10 = 0`)
	exec1(t, src, `BEGIN; ALTER TABLE public.pk DROP CONSTRAINT pk_pkey; ALTER TABLE public.pk ADD PRIMARY KEY (tenant, id);
		INSERT INTO public.pk SELECT i, 2, 'other tenant ' || i FROM generate_series(1, 30) i; COMMIT`)
	exec1(t, src, `UPDATE public.pk SET v = 'changed' WHERE tenant = 1 AND id <= 5; DELETE FROM public.pk WHERE tenant = 2 AND id > 25;
		INSERT INTO public.pk VALUES (1, 3, 'third tenant')`)
	time.Sleep(time.Second)
	if n := l.end(); n == 0 {
		t.Fatal("the write load committed nothing")
	}
	waitEqual(t, src, dst, "public.pk", "public.pk", "id, tenant, v", 60*time.Second)
	waitEqual(t, src, dst, "public.sc", "public.sc", scColumnNames(t, src), 60*time.Second)
	if got, want := primaryKeyOf(t, dst, "public.pk"), primaryKeyOf(t, src, "public.pk"); got != want {
		t.Errorf("destination primary key %q, the source's %q", got, want)
	}
	applied := fmt.Sprint(s.logsWith("pk", "Schema change applied"))
	if !strings.Contains(applied, `ADD PRIMARY KEY ("tenant", "id")`) {
		t.Errorf("no \"Schema change applied\" entry with the new primary key: %s", applied)
	}
	if m := s.full("pk"); m.Status != "running" || m.ErrorCount != 0 {
		t.Errorf("status %s, error_count %d (%s), want running without errors", m.Status, m.ErrorCount, m.ErrorMessage)
	}
	s.noWarnings("pk")
}
