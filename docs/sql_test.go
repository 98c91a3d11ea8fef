package docs_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ddl"
	"github.com/pgmirror/pgmirror/engine/positions"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// sqlBlock is one fenced SQL example of a doc.
type sqlBlock struct {
	doc   string
	line  int    // of the opening fence
	where string // "" for the catalog, else the fence's second word
	text  string
}

// peerFences are the fences of SQL meant for a peer rather than the
// catalog (```sql source, ```sql destination): TestCatalogSQL skips them,
// TestPeerSQL runs them on a database set up as that peer.
var peerFences = map[string]bool{"source": true, "destination": true}

// sqlBlocks returns every ```sql block of the docs in this directory.
func sqlBlocks(t *testing.T) []sqlBlock {
	t.Helper()
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []sqlBlock
	for _, doc := range docs {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var cur *sqlBlock
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			switch {
			case cur != nil && line == "```":
				blocks = append(blocks, *cur)
				cur = nil
			case cur != nil:
				cur.text += sc.Text() + "\n"
			case strings.HasPrefix(line, "```sql"):
				info := strings.Fields(strings.TrimPrefix(line, "```"))
				b := &sqlBlock{doc: doc, line: n}
				if len(info) > 1 {
					b.where = info[1]
					if !peerFences[b.where] || len(info) > 2 {
						t.Errorf("%s:%d: fence %q: use ```sql for the catalog, ```sql source or ```sql destination for a peer", doc, n, line)
					}
				}
				cur = b
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if cur != nil {
			t.Errorf("%s:%d: SQL block is not closed", doc, cur.line)
		}
	}
	return blocks
}

// TestCatalogSQL runs every SQL example of the docs that is meant for the
// catalog (a plain ```sql fence) against a freshly migrated catalog with a
// mirror named orders, each in a transaction that is rolled back. An
// example that the catalog refuses (a renamed column, a typo) fails the
// test. Examples for a source or destination database are left to
// TestPeerSQL.
func TestCatalogSQL(t *testing.T) {
	ctx := context.Background()
	blocks := sqlBlocks(t)
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	if err := db.Migrate(ctx, pool, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	seedCatalog(t, db.New(pool, pgtest.Keyring(t)))

	ran := 0
	for _, b := range blocks {
		if b.where != "" {
			t.Logf("%s:%d: not run here: meant for the %s database (TestPeerSQL)", b.doc, b.line, b.where)
			continue
		}
		if strings.TrimSpace(b.text) == "" {
			t.Errorf("%s:%d: empty SQL block", b.doc, b.line)
			continue
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '10s'"); err != nil {
			t.Fatal(err)
		}
		// No arguments: pgx sends the block with the simple protocol, so a
		// block of several statements runs as psql would run it.
		if _, err := tx.Exec(ctx, b.text); err != nil {
			t.Errorf("%s:%d: the catalog refuses this example: %v\n%s", b.doc, b.line, err, b.text)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		ran++
	}
	if ran < 10 {
		t.Errorf("ran only %d catalog SQL examples; catalog.md alone has more", ran)
	}
	t.Logf("ran %d catalog SQL examples", ran)
}

// seedCatalog adds what the examples name: peers, a mirror orders with a
// table, and an ERROR log entry, so that their joins and subqueries meet
// rows.
func seedCatalog(t *testing.T, store *db.Store) {
	t.Helper()
	ctx := context.Background()
	src, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: "src", Host: "h", Port: 5432, User: "u", Password: "p", Database: "d", SSLMode: "disable"})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	m, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{
		Name: "orders", SourcePeerID: src.ID, DestinationPeerID: src.ID,
		SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1,
		CDCSyncIntervalSeconds: 1, CDCBatchSize: 1, PublicationName: "pub_orders", ReplicationSlotName: "slot_orders",
		Tables: []change.Mapping{{Source: change.TableName{Schema: "public", Name: "orders"}, Destination: change.TableName{Schema: "public", Name: "orders"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.LogInsert(ctx, m.ID, db.LevelError, "Failed to apply CDC batch", map[string]any{"error": "example", "operation": "apply"}); err != nil {
		t.Fatal(err)
	}
}

// TestPeerSQL runs the examples meant for a peer: ```sql source blocks on
// a database where pgmirror's DDL capture trigger is installed, ```sql
// destination blocks on one with pgmirror's _pgmirror tables and the role
// pgmirror_dest the examples name as the destination peer's user. Each runs
// in a transaction that is rolled back. A block that drops the DDL capture
// objects must leave none of them.
func TestPeerSQL(t *testing.T) {
	ctx := context.Background()
	blocks := sqlBlocks(t)
	cluster := pgtest.CatalogCluster(t)

	source := pgtest.Pool(t, pgtest.NewDatabase(t, cluster))
	conn, err := source.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = ddl.Install(ctx, conn.Conn())
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	dest := pgtest.Pool(t, pgtest.NewDatabase(t, cluster))
	if err := positions.Ensure(ctx, dest); err != nil {
		t.Fatal(err)
	}

	ran := map[string]int{}
	for _, b := range blocks {
		pool, setup := source, ""
		switch b.where {
		case "":
			continue
		case "destination":
			pool, setup = dest, "CREATE ROLE pgmirror_dest"
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL statement_timeout = '10s'"); err != nil {
			t.Fatal(err)
		}
		if setup != "" {
			if _, err := tx.Exec(ctx, setup); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.Exec(ctx, b.text); err != nil {
			t.Errorf("%s:%d: the %s database refuses this example: %v\n%s", b.doc, b.line, b.where, err, b.text)
		} else if strings.Contains(b.text, "DROP EVENT TRIGGER") {
			var left []string
			rows, err := tx.Query(ctx, `SELECT 'event trigger ' || evtname FROM pg_event_trigger WHERE evtname LIKE 'pgmirror%'
				UNION ALL SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
				  JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '_pgmirror' AND p.proname LIKE 'pgmirror_ddl%'
				UNION ALL SELECT 'relation ' || c.oid::regclass::text FROM pg_class c
				  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '_pgmirror' AND c.relname LIKE 'pgmirror_ddl%'`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var l string
				if err := rows.Scan(&l); err != nil {
					t.Fatal(err)
				}
				left = append(left, l)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Errorf("%s:%d: after these statements the DDL capture still has: %s", b.doc, b.line, strings.Join(left, ", "))
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		ran[b.where]++
	}
	if ran["source"] == 0 || ran["destination"] == 0 {
		t.Errorf("ran %v peer SQL examples; the docs have both kinds", ran)
	}
	t.Logf("ran peer SQL examples: %v", ran)
}
