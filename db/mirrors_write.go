package db

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// MirrorCreateParams is a new mirror's configuration. Every field must be
// filled (the API applies the defaults).
type MirrorCreateParams struct {
	Name                        string
	SourcePeerID                int64
	DestinationPeerID           int64
	SnapshotNumRowsPerPartition int
	SnapshotMaxParallelWorkers  int
	SnapshotNumTablesInParallel int
	CDCSyncIntervalSeconds      int
	CDCBatchSize                int
	DoInitialSnapshot           bool
	PublicationName             string
	ReplicationSlotName         string
	Tables                      []change.Mapping
	// SchemaMappings are the source schemas mapped as a whole; FromSchema
	// marks the tables of Tables that come from one of them.
	SchemaMappings []SchemaMapping
	FromSchema     map[change.TableName]bool
	// CreatedPublication and CreatedSlot say that the publication and slot
	// exist already and belong to the new mirror (a reverse mirror made by
	// a cut-over); the API leaves them false.
	CreatedPublication, CreatedSlot bool
	// Sequences are the listed sequences (nil: none).
	Sequences []SequenceName
	// ExistingDestinationRows is what a table's first copy does with rows
	// its destination table holds ("": ExistingRowsRefuse).
	ExistingDestinationRows ExistingRows
	// CaptureDDL: the mirror applies the schema changes captured by
	// pgmirror's event trigger on the source.
	CaptureDDL bool
	// SchemaChanges is what CDC does when a mapped source table's columns
	// change ("": SchemaChangesApply).
	SchemaChanges SchemaChanges
}

// MirrorCreate inserts a mirror (status initializing, desired state
// running) and its table mappings (status pending, position = index) in tx.
// A live mirror with the same name gives ErrConflict.
func (s *Store) MirrorCreate(ctx context.Context, p MirrorCreateParams) (Mirror, error) {
	var id int64
	err := s.q.QueryRow(ctx, `INSERT INTO mirrors (name, source_peer_id, destination_peer_id,
			snapshot_num_rows_per_partition, snapshot_max_parallel_workers, snapshot_num_tables_in_parallel,
			cdc_sync_interval_seconds, cdc_batch_size, do_initial_snapshot, publication_name, replication_slot_name,
			created_publication, created_slot, sequences, existing_destination_rows, schema_changes, capture_ddl)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING id`,
		p.Name, p.SourcePeerID, p.DestinationPeerID,
		p.SnapshotNumRowsPerPartition, p.SnapshotMaxParallelWorkers, p.SnapshotNumTablesInParallel,
		p.CDCSyncIntervalSeconds, p.CDCBatchSize, p.DoInitialSnapshot, p.PublicationName, p.ReplicationSlotName,
		p.CreatedPublication, p.CreatedSlot, sequencesValue(p.Sequences), cmp.Or(p.ExistingDestinationRows, ExistingRowsRefuse),
		cmp.Or(p.SchemaChanges, SchemaChangesApply), p.CaptureDDL).Scan(&id)
	if err != nil {
		return Mirror{}, fmt.Errorf("create mirror %q: %w", p.Name, translate(err))
	}
	for i, t := range p.Tables {
		if err := insertMirrorTable(ctx, s.q, id, i, t, p.FromSchema[t.Source]); err != nil {
			return Mirror{}, fmt.Errorf("create mirror %q: %w", p.Name, err)
		}
	}
	if err := replaceSchemaMappings(ctx, s.q, id, p.SchemaMappings); err != nil {
		return Mirror{}, fmt.Errorf("create mirror %q: %w", p.Name, err)
	}
	m, err := queryMirror(ctx, s.q, `SELECT `+mirrorColumns+mirrorFrom+` WHERE m.id = $1`, id)
	if err != nil {
		return Mirror{}, fmt.Errorf("create mirror %q: read back: %w", p.Name, translate(err))
	}
	return m, nil
}

func insertMirrorTable(ctx context.Context, tx Executor, mirrorID int64, position int, t change.Mapping, fromSchema bool) error {
	exclude := t.ExcludeColumns
	if exclude == nil {
		exclude = []string{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO mirror_tables (mirror_id, position, source_schema, source_table, destination_schema, destination_table, exclude_columns, from_schema_mapping)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		mirrorID, position, t.Source.Schema, t.Source.Name, t.Destination.Schema, t.Destination.Name, exclude, fromSchema)
	if err != nil {
		return fmt.Errorf("insert table mapping %s: %w", t.Source, translate(err))
	}
	return nil
}

// MirrorSoftDelete marks a mirror deleted (deleted_at = now()): it
// disappears from the API at once and its name becomes free. The cleanup
// job removes the row later.
func (s *Store) MirrorSoftDelete(ctx context.Context, id int64) error {
	tag, err := s.q.Exec(ctx, `UPDATE mirrors SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL`, id)
	if err != nil {
		return fmt.Errorf("delete mirror %d: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete mirror %d: %w", id, ErrNotFound)
	}
	return nil
}

func (s *Store) updateMirror(ctx context.Context, what string, id int64, sql string, args ...any) error {
	tag, err := s.q.Exec(ctx, sql, append([]any{id}, args...)...)
	if err != nil {
		return fmt.Errorf("%s mirror %d: %w", what, id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s mirror %d: %w", what, id, ErrNotFound)
	}
	return nil
}

// MirrorPause sets desired state and status to paused.
func (s *Store) MirrorPause(ctx context.Context, id int64) error {
	return s.updateMirror(ctx, "pause", id,
		`UPDATE mirrors SET desired_state = 'paused', status = 'paused' WHERE id = $1 AND deleted_at IS NULL`)
}

// MirrorResume sets desired state and status to running.
func (s *Store) MirrorResume(ctx context.Context, id int64) error {
	return s.updateMirror(ctx, "resume", id,
		`UPDATE mirrors SET desired_state = 'running', status = 'running' WHERE id = $1 AND deleted_at IS NULL`)
}

// MirrorRequestAction records a control request (ActionResync or
// ActionSyncSchema) for the mirror's worker and sets the desired state (and
// a paused status) to running, so a paused mirror resumes to carry it out.
func (s *Store) MirrorRequestAction(ctx context.Context, id int64, action PendingAction) error {
	return s.updateMirror(ctx, "request "+string(action)+" on", id,
		`UPDATE mirrors SET pending_action = $2, desired_state = 'running',
			status = CASE WHEN status = 'paused' THEN 'running' ELSE status END
		WHERE id = $1 AND deleted_at IS NULL`, action)
}

// MirrorSettings are the settings of a mirror that may be changed while it
// is paused (PATCH /v1/mirrors/{name}); a nil field is left as it is.
type MirrorSettings struct {
	SchemaChanges *SchemaChanges
	CaptureDDL    *bool
}

// MirrorUpdateSettings changes the settings set in s.
func (s *Store) MirrorUpdateSettings(ctx context.Context, id int64, set MirrorSettings) error {
	if set.SchemaChanges != nil {
		if err := s.updateMirror(ctx, "set schema_changes of", id,
			`UPDATE mirrors SET schema_changes = $2 WHERE id = $1 AND deleted_at IS NULL`, *set.SchemaChanges); err != nil {
			return err
		}
	}
	if set.CaptureDDL != nil {
		if err := s.MirrorSetCaptureDDL(ctx, id, *set.CaptureDDL); err != nil {
			return err
		}
	}
	return nil
}

// MirrorRequestRetry makes a failed mirror due for retry now.
func (s *Store) MirrorRequestRetry(ctx context.Context, id int64) error {
	return s.updateMirror(ctx, "retry", id,
		`UPDATE mirrors SET next_retry_at = now() WHERE id = $1 AND deleted_at IS NULL`)
}

// MirrorTableRequestResync asks the mirror's worker to re-snapshot one
// table, identified by its source schema and name. It returns ErrNotFound
// when the mirror has no such table.
func (s *Store) MirrorTableRequestResync(ctx context.Context, mirrorID int64, source change.TableName) error {
	tag, err := s.q.Exec(ctx, `UPDATE mirror_tables SET resync_requested_at = now()
		WHERE mirror_id = $1 AND source_schema = $2 AND source_table = $3`, mirrorID, source.Schema, source.Name)
	if err != nil {
		return fmt.Errorf("request resync of %s in mirror %d: %w", source, mirrorID, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("request resync of %s in mirror %d: %w", source, mirrorID, ErrNotFound)
	}
	return nil
}

// MirrorTablesReplace makes mappings the mirror's complete set of tables:
// rows whose source table stays are kept (destination and excluded columns
// updated; a changed destination puts the table back to pending so it is
// snapshotted again), removed ones are deleted and new ones inserted as
// pending. Positions follow the order of mappings. It returns the new rows.
func (s *Store) MirrorTablesReplace(ctx context.Context, mirrorID int64, mappings []change.Mapping) ([]MirrorTable, error) {
	return s.MirrorTablesReplaceWithSchemas(ctx, mirrorID, mappings, nil, nil)
}

// MirrorTablesReplaceWithSchemas is MirrorTablesReplace for a set of tables
// that includes the expansion of schema mappings: schemas become the
// mirror's schema mappings and fromSchema marks the tables of mappings that
// come from one of them.
func (s *Store) MirrorTablesReplaceWithSchemas(ctx context.Context, mirrorID int64, mappings []change.Mapping,
	schemas []SchemaMapping, fromSchema map[change.TableName]bool) ([]MirrorTable, error) {
	if err := replaceSchemaMappings(ctx, s.q, mirrorID, schemas); err != nil {
		return nil, err
	}
	current, err := mirrorTables(ctx, s.q, mirrorID)
	if err != nil {
		return nil, err
	}
	keep := map[change.TableName]bool{}
	for _, m := range mappings {
		keep[m.Source] = true
	}
	existing := map[change.TableName]MirrorTable{}
	for _, t := range current {
		src := change.TableName{Schema: t.SourceSchema, Name: t.SourceTable}
		if !keep[src] {
			if _, err := s.q.Exec(ctx, `DELETE FROM mirror_tables WHERE id = $1`, t.ID); err != nil {
				return nil, fmt.Errorf("remove table %s from mirror %d: %w", src, mirrorID, translate(err))
			}
			continue
		}
		existing[src] = t
	}
	for i, m := range mappings {
		exclude := m.ExcludeColumns
		if exclude == nil {
			exclude = []string{}
		}
		t, ok := existing[m.Source]
		if !ok {
			if err := insertMirrorTable(ctx, s.q, mirrorID, i, m, fromSchema[m.Source]); err != nil {
				return nil, fmt.Errorf("add table to mirror %d: %w", mirrorID, err)
			}
			continue
		}
		_, err := s.q.Exec(ctx, `UPDATE mirror_tables SET position = $2, destination_schema = $3, destination_table = $4, exclude_columns = $5,
				from_schema_mapping = $6,
				status = CASE WHEN destination_schema = $3 AND destination_table = $4 THEN status ELSE 'pending' END,
				destination_taken_at = CASE WHEN destination_schema = $3 AND destination_table = $4 THEN destination_taken_at END
			WHERE id = $1`, t.ID, i, m.Destination.Schema, m.Destination.Name, exclude, fromSchema[m.Source])
		if err != nil {
			return nil, fmt.Errorf("update table %s of mirror %d: %w", m.Source, mirrorID, translate(err))
		}
	}
	return mirrorTables(ctx, s.q, mirrorID)
}

// MirrorUsingSlotOrPublication returns the name of a mirror (live or being
// deleted) whose replication slot is slot or whose publication is
// publication, or "" when there is none.
func (s *Store) MirrorUsingSlotOrPublication(ctx context.Context, slot, publication string) (string, error) {
	return mirrorUsingSlotOrPublication(ctx, s.q, slot, publication)
}

// mirrorNamesLockKey is the transaction advisory lock that serialises the
// choice of slot and publication names ("pgmnames" in ASCII).
const mirrorNamesLockKey int64 = 0x7067_6d6e_616d_6573

// LockMirrorNames takes, until the transaction ends (call it on a Store from
// With), the lock that serialises mirror creation: with it, checking that a
// slot and publication name are free (MirrorUsingSlotOrPublication in the
// same transaction) and inserting the mirror are atomic, so two mirrors
// created at once never share a slot. Nothing else takes it.
func (s *Store) LockMirrorNames(ctx context.Context) error {
	if _, err := s.q.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, mirrorNamesLockKey); err != nil {
		return fmt.Errorf("lock mirror names: %w", err)
	}
	return nil
}

func mirrorUsingSlotOrPublication(ctx context.Context, q Executor, slot, publication string) (string, error) {
	var name string
	err := q.QueryRow(ctx, `SELECT name FROM mirrors WHERE replication_slot_name = $1 OR publication_name = $2
		ORDER BY deleted_at IS NOT NULL, id LIMIT 1`, slot, publication).Scan(&name)
	if err == pgx.ErrNoRows {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find mirror using slot %s or publication %s: %w", slot, publication, err)
	}
	return name, nil
}

// sequencesValue is the JSON array stored for listed sequences ([] for none).
func sequencesValue(s []SequenceName) []SequenceName {
	if s == nil {
		return []SequenceName{}
	}
	return s
}
