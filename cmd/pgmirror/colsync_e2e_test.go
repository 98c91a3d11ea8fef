package main

import (
	"testing"
	"time"
)

// TestSchemaChangesWarnKeepsIdentity: under schema_changes warn, an identity
// column dropped on the source is kept on the destination, as every kept
// column is, and rows written after the drop keep arriving: the identity
// gives them a value, so the column keeps its NOT NULL (PostgreSQL refuses
// to drop the NOT NULL of an identity column, which the applier once tried,
// failing every batch of the table).
func TestSchemaChangesWarnKeepsIdentity(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.kt (id integer PRIMARY KEY, v text, seq bigint GENERATED ALWAYS AS IDENTITY);
		INSERT INTO public.kt (id, v) SELECT g, 'v' || g FROM generate_series(1, 20) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "kti", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "schema_changes": "warn",
		"table_mappings": []any{map[string]any{"source_schema": "public", "source_table": "kt", "destination_schema": "public", "destination_table": "kt"}},
	}, 201, nil)
	s.dumpOnFailure("kti")
	s.waitStatus("kti", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.kt", "public.kt", "id, v, seq", 60*time.Second)

	exec1(t, src, `ALTER TABLE public.kt DROP COLUMN seq`)
	exec1(t, src, `INSERT INTO public.kt (id, v) VALUES (100, 'after the drop'); UPDATE public.kt SET v = 'changed' WHERE id = 3`)
	waitEqual(t, src, dst, "public.kt", "public.kt", "id, v", 60*time.Second)

	var kept int64
	queryOne(t, dst, &kept, `SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'kt'
		AND column_name = 'seq' AND is_nullable = 'NO' AND is_identity = 'YES'`)
	if kept != 1 {
		t.Errorf("the destination's identity column seq was not kept NOT NULL")
	}
	var filled int64
	queryOne(t, dst, &filled, `SELECT count(*) FROM public.kt WHERE id = 100 AND seq IS NOT NULL`)
	if filled != 1 {
		t.Errorf("the row written after the drop has no identity value on the destination")
	}
}
