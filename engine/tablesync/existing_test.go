package tablesync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestExistingRows copies tables into destination tables that hold rows,
// under each ExistingRows: RefuseRows stops the run before anything is
// truncated or copied (and copies into an empty table), TruncateRows
// replaces the rows, KeepRows upserts the source's rows over them by
// primary key (in binary and in text format, over several partitions and
// writers) and keeps the rows the source does not have, and refuses a
// table with rows but no primary key.
func TestExistingRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, srcURL, `
		CREATE TABLE public.a (id int PRIMARY KEY, v text);
		INSERT INTO public.a SELECT g, 'new ' || g FROM generate_series(1, 3000) g;
		CREATE TABLE public.b (id int PRIMARY KEY, v text);
		INSERT INTO public.b SELECT g, 'new ' || g FROM generate_series(1, 10) g;
		CREATE TABLE public.c (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v numeric);
		INSERT INTO public.c (v) SELECT g FROM generate_series(1, 10) g;
		CREATE TABLE public.nokey (v text);
		INSERT INTO public.nokey VALUES ('x');
		CREATE TABLE public.e (id int PRIMARY KEY);
		INSERT INTO public.e VALUES (1);`)
	pgtest.Exec(t, dstURL, `
		CREATE TABLE public.a (id int PRIMARY KEY, v text);
		INSERT INTO public.a VALUES (1, 'old 1'), (2, 'old 2'), (-1, 'only here');
		CREATE TABLE public.b (id int PRIMARY KEY, v text);
		INSERT INTO public.b VALUES (1, 'old 1'), (-1, 'only here');
		-- another type: copied in text format
		CREATE TABLE public.c (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
		INSERT INTO public.c (id, v) OVERRIDING SYSTEM VALUE VALUES (1, 'old'), (-1, 'only here');
		CREATE TABLE public.nokey (v text);
		INSERT INTO public.nokey VALUES ('old');
		CREATE TABLE public.e (id int PRIMARY KEY);`)
	dst := connect(t, dstURL)
	count := func(sql string) int64 {
		t.Helper()
		var n int64
		if err := dst.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	name := func(n string) change.TableName { return change.TableName{Schema: "public", Name: n} }
	run := func(existing map[change.TableName]ExistingRows, tables ...string) (bool, error) {
		taken := false
		err := Run(ctx, Config{Source: pgtest.ConnConfig(t, srcURL), Dest: pgtest.ConnConfig(t, dstURL),
			Tables: testMappings(tables...), Existing: existing, RowsPerPartition: 1000, MaxParallelWorkers: 2,
			Taken: func(context.Context) error { taken = true; return nil }}, nil)
		return taken, err
	}

	// Refused: b has rows; a (to be truncated) is left alone as well.
	taken, err := run(map[change.TableName]ExistingRows{name("b"): RefuseRows, name("e"): RefuseRows}, "a", "b", "e")
	var refused *ExistingRowsError
	if !errors.As(err, &refused) || len(refused.Tables) != 1 || refused.Tables[0] != name("b") {
		t.Fatalf("Run with rows in a refused table: %v, want an ExistingRowsError naming public.b", err)
	}
	if taken {
		t.Error("Taken was called for a refused run")
	}
	if n := count(`SELECT count(*) FROM public.a`) + count(`SELECT count(*) FROM public.b`); n != 5 {
		t.Errorf("%d rows in a and b after a refused run, want the 5 there before", n)
	}

	// Refused but empty: copied.
	if taken, err := run(map[change.TableName]ExistingRows{name("e"): RefuseRows}, "e"); err != nil || !taken {
		t.Fatalf("Run into an empty refused table: taken %v, %v", taken, err)
	}
	if n := count(`SELECT count(*) FROM public.e`); n != 1 {
		t.Errorf("e has %d rows, want 1", n)
	}

	// Kept: a (binary, several partitions), b, and c (text, identity).
	keep := map[change.TableName]ExistingRows{name("a"): KeepRows, name("b"): KeepRows, name("c"): KeepRows}
	if _, err := run(keep, "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		sql  string
		want int64
	}{
		{`SELECT count(*) FROM public.a WHERE v = 'new ' || id`, 3000},
		{`SELECT count(*) FROM public.a WHERE id = -1 AND v = 'only here'`, 1},
		{`SELECT count(*) FROM public.b WHERE v = 'new ' || id`, 10},
		{`SELECT count(*) FROM public.b`, 11},
		{`SELECT count(*) FROM public.c WHERE v = id::text`, 10},
		{`SELECT count(*) FROM public.c`, 11},
	} {
		if n := count(q.sql); n != q.want {
			t.Errorf("%s = %d, want %d", q.sql, n, q.want)
		}
	}

	// Kept without a primary key: refused, nothing changed.
	_, err = run(map[change.TableName]ExistingRows{name("nokey"): KeepRows}, "nokey")
	var noKey *NoPrimaryKeyError
	if !errors.As(err, &noKey) || noKey.Tables[0] != name("nokey") {
		t.Fatalf("Run keeping rows of a table without a primary key: %v, want a NoPrimaryKeyError", err)
	}
	if n := count(`SELECT count(*) FROM public.nokey WHERE v = 'old'`); n != 1 {
		t.Error("the table without a primary key changed")
	}

	// Truncated (the default): only the source's rows.
	if _, err := run(nil, "b", "nokey"); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM public.b`) + count(`SELECT count(*) FROM public.nokey WHERE v = 'x'`); n != 11 {
		t.Errorf("b and nokey hold %d rows after a truncating run, want 10 + 1", n)
	}
}
