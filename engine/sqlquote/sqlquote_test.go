package sqlquote_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Every quoted form reads back as the original text on a real server, with
// standard_conforming_strings on and off: names and values with quotes,
// backslashes, dots, spaces, newlines and non-ASCII characters.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	texts := []string{"plain", `it's`, `back\slash`, `\'`, `a"b`, `"`, "two words", "dot.ted", "new\nline", "naïve ☃", `E'x'`, `''`, `\\`}
	for _, scs := range []string{"on", "off"} {
		if _, err := conn.Exec(ctx, "SET standard_conforming_strings = "+scs); err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			var got string
			if err := conn.QueryRow(ctx, "SELECT "+sqlquote.Literal(s)).Scan(&got); err != nil || got != s {
				t.Errorf("standard_conforming_strings=%s: Literal(%q) read back %q (%v)", scs, s, got, err)
			}
			if _, err := conn.Exec(ctx, "CREATE TEMP TABLE "+sqlquote.Ident(s)+" ("+sqlquote.Ident(s)+" int, "+sqlquote.Ident(s+"2")+" int)"); err != nil {
				t.Errorf("create a table named %q: %v", s, err)
				continue
			}
			if _, err := conn.Exec(ctx, "SELECT "+sqlquote.Idents([]string{s, s + "2"})+" FROM "+sqlquote.Qualified("pg_temp", s)); err != nil {
				t.Errorf("select the columns %q: %v", sqlquote.Idents([]string{s, s + "2"}), err)
			}
			var name string
			if err := conn.QueryRow(ctx, "SELECT relname FROM pg_class WHERE oid = $1::regclass", "pg_temp."+sqlquote.Ident(s)).Scan(&name); err != nil || name != s {
				t.Errorf("Ident(%q) names %q (%v)", s, name, err)
			}
			if _, err := conn.Exec(ctx, "DROP TABLE "+sqlquote.Qualified("pg_temp", s)); err != nil {
				t.Errorf("drop %q: %v", s, err)
			}
		}
	}
}
