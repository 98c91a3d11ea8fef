package cdc_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestOnUnmappedTable: a publication that sends a table the run does not
// replicate (as one with FOR TABLES IN SCHEMA does for a table created in
// the schema) makes the run call OnUnmappedTable once for it, and its
// changes are not applied; the mapped table replicates as usual.
func TestOnUnmappedTable(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.items (id int PRIMARY KEY); CREATE TABLE public.other (id int PRIMARY KEY)`,
		`CREATE TABLE public.items (id int PRIMARY KEY)`, same("public", "items"))
	pgtest.Exec(t, b.src, `ALTER PUBLICATION `+b.cfg.PublicationName+` ADD TABLE public.other`)
	var mu sync.Mutex
	var met []change.TableName
	b.cfg.OnUnmappedTable = func(t change.TableName) {
		mu.Lock()
		defer mu.Unlock()
		met = append(met, t)
	}
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO other SELECT generate_series(1, 10); INSERT INTO items SELECT generate_series(1, 10);
		INSERT INTO other VALUES (11)`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)
	require.NoError(t, r.halt(t))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []change.TableName{tn("public", "other")}, met)
}
