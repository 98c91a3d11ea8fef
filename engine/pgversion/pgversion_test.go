package pgversion_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/pgversion"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// TestServer pins what each major may use: a change here changes what
// pgmirror sends to real servers (the version matrix tests them).
func TestServer(t *testing.T) {
	type caps struct {
		binary, messages, empty, markers, multiranges, walStatus, partitionRoot, virtual, pubGenCols, origin bool
	}
	for _, c := range []struct {
		num  int
		want caps
	}{
		{120022, caps{empty: true, markers: true}},
		{130023, caps{empty: true, markers: true, walStatus: true, partitionRoot: true}},
		{140023, caps{binary: true, messages: true, empty: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true}},
		{150014, caps{binary: true, messages: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true}},
		{160014, caps{binary: true, messages: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true, origin: true}},
		{180004, caps{binary: true, messages: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true, virtual: true, pubGenCols: true, origin: true}},
	} {
		s := pgversion.Of(c.num)
		got := caps{s.BinaryOutput(), s.Messages(), s.SendsEmptyTransactions(), s.Markers(), s.Multiranges(), s.WALStatus(),
			s.PartitionRoot(), s.VirtualGenerated(), s.PublishGeneratedColumns(), s.OriginOption()}
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", s, got, c.want)
		}
		if err := s.Check("source"); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	err := pgversion.Of(110022).Check("source database")
	if !errors.Is(err, pgversion.ErrUnsupported) || !strings.Contains(err.Error(), "the source database runs PostgreSQL 11.22") ||
		!strings.Contains(err.Error(), "PostgreSQL 12 or later") {
		t.Errorf("11.22: %v", err)
	}
	if got := pgversion.Of(90624).String(); got != "PostgreSQL 9.6.24" {
		t.Errorf("9.6.24 prints as %q", got)
	}
}

// TestParseServerVersion: the forms server_version takes.
func TestParseServerVersion(t *testing.T) {
	for v, want := range map[string]int{
		"15.4": 150004, "15.4 (Debian 15.4-1.pgdg120+1)": 150004, "13.23": 130023, "9.6.24": 90624,
		"18beta1": 180000, "17devel": 170000, "16rc1": 160000, "12.22 (Ubuntu 12.22-0ubuntu0.20.04.1)": 120022,
	} {
		if got, ok := pgversion.ParseServerVersion(v); !ok || got != want {
			t.Errorf("%q: %d %v, want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "devel", "9", "x15.4", "1234567.1"} {
		if got, ok := pgversion.ParseServerVersion(v); ok {
			t.Errorf("%q: %d, want no version", v, got)
		}
	}
}

// TestReadWithoutQuery: on a connection and in a transaction, Read gives
// what server_version_num says, without asking the server (the version a
// connection reports at login).
func TestReadWithoutQuery(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t, pgtest.DestCluster(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var want int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	counting := &countingConn{Conn: conn}
	got, err := pgversion.Read(ctx, counting.Conn)
	if err != nil || got.Num != want {
		t.Fatalf("Read on a connection: %d, %v; want %d", got.Num, err, want)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if got, err = pgversion.Read(ctx, tx); err != nil || got.Num != want {
		t.Fatalf("Read in a transaction: %d, %v; want %d", got.Num, err, want)
	}
	// Anything else asks the server.
	if got, err = pgversion.Read(ctx, counting); err != nil || got.Num != want || counting.queries != 1 {
		t.Fatalf("Read on another querier: %d, %v after %d queries; want %d after 1", got.Num, err, counting.queries, want)
	}
}

// countingConn is a querier that is not a connection, counting its queries.
type countingConn struct {
	*pgx.Conn
	queries int
}

func (c *countingConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.queries++
	return c.Conn.QueryRow(ctx, sql, args...)
}
