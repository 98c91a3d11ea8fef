package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/jobs"
)

// tableMapping is the API form of a table mapping.
type tableMapping struct {
	SourceSchema      string   `json:"source_schema" minLength:"1" maxLength:"63"`
	SourceTable       string   `json:"source_table" minLength:"1" maxLength:"63"`
	DestinationSchema string   `json:"destination_schema" minLength:"1" maxLength:"63"`
	DestinationTable  string   `json:"destination_table" minLength:"1" maxLength:"63"`
	ExcludeColumns    []string `json:"exclude_columns,omitempty" maxItems:"1600" minLength:"1" maxLength:"63" uniqueItems:"true" doc:"Column names left out of replication (at most 1600, each 1 to 63 bytes)."`
}

// sequenceRef names a source sequence listed in a mirror's configuration.
type sequenceRef struct {
	Schema string `json:"schema" minLength:"1" maxLength:"63"`
	Name   string `json:"name" minLength:"1" maxLength:"63"`
}

func sequencesResponse(seqs []db.SequenceName) []sequenceRef {
	out := make([]sequenceRef, len(seqs))
	for i, s := range seqs {
		out[i] = sequenceRef{Schema: s.Schema, Name: s.Name}
	}
	return out
}

// validateSequences checks the listed sequences for repeats.
func validateSequences(refs []sequenceRef) ([]db.SequenceName, error) {
	out := make([]db.SequenceName, 0, len(refs))
	seen := map[db.SequenceName]bool{}
	for _, r := range refs {
		n := db.SequenceName{Schema: r.Schema, Name: r.Name}
		if seen[n] {
			return nil, errorf(http.StatusBadRequest, "Invalid request: sequence %s.%s is listed twice in sequences", r.Schema, r.Name)
		}
		seen[n] = true
		out = append(out, n)
	}
	return out, nil
}

func mappingResponse(t db.MirrorTable) tableMapping {
	return tableMapping{SourceSchema: t.SourceSchema, SourceTable: t.SourceTable,
		DestinationSchema: t.DestinationSchema, DestinationTable: t.DestinationTable, ExcludeColumns: t.ExcludeColumns}
}

type mirrorCreateInput struct {
	Body mirrorCreateBody
}

// mirrorCreateBody is the body of POST /v1/mirrors.
type mirrorCreateBody struct {
	Name                        string           `json:"name" minLength:"1" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9_.-]*$" patternDescription:"letters, digits, '_', '.' and '-', starting with a letter or digit" doc:"Unique mirror name, used in paths."`
	SourcePeer                  string           `json:"source_peer" minLength:"1" maxLength:"128" doc:"Name of an existing peer to read from."`
	DestinationPeer             string           `json:"destination_peer" minLength:"1" maxLength:"128" doc:"Name of an existing peer to write to."`
	TableMappings               []tableMapping   `json:"table_mappings" minItems:"1" maxItems:"1000"`
	SnapshotNumRowsPerPartition int              `json:"snapshot_num_rows_per_partition,omitempty" minimum:"1" maximum:"100000000" default:"500000"`
	SnapshotMaxParallelWorkers  int              `json:"snapshot_max_parallel_workers,omitempty" minimum:"1" maximum:"64" default:"4"`
	SnapshotNumTablesInParallel int              `json:"snapshot_num_tables_in_parallel,omitempty" minimum:"1" maximum:"64" default:"4"`
	CDCSyncIntervalSeconds      int              `json:"cdc_sync_interval_seconds,omitempty" minimum:"1" maximum:"86400" default:"60"`
	CDCBatchSize                int              `json:"cdc_batch_size,omitempty" minimum:"1" maximum:"1000000" default:"10000"`
	DoInitialSnapshot           *bool            `json:"do_initial_snapshot,omitempty" default:"true" doc:"When false, only changes made after creation are replicated."`
	PublicationName             string           `json:"publication_name,omitempty" pattern:"^[a-z_][a-z0-9_]{0,62}$" patternDescription:"a PostgreSQL identifier of lowercase letters, digits and '_', at most 63 characters, not starting with a digit" doc:"Default: pgmirror_pub_<name>."`
	ReplicationSlotName         string           `json:"replication_slot_name,omitempty" pattern:"^[a-z_][a-z0-9_]{0,62}$" patternDescription:"a PostgreSQL identifier of lowercase letters, digits and '_', at most 63 characters, not starting with a digit" doc:"Default: pgmirror_slot_<name>."`
	ExistingDestinationRows     db.ExistingRows  `json:"existing_destination_rows,omitempty" default:"refuse" doc:"What a table's first copy does with rows its destination table already holds: refuse (default: the request is refused with 409 naming the tables, and a worker that finds rows there before copying fails the mirror instead of copying), truncate (the table is emptied first), or keep (the rows stay and the source's rows are copied over them with upserts by primary key, for a destination that holds an older copy; 409 for a table with rows but no primary key). Later copies (resync, a restarted copy) always truncate. Without an initial snapshot nothing is copied and the rows stay."`
	CaptureDDL                  bool             `json:"capture_ddl,omitempty" default:"false" doc:"Capture schema changes of the mapped tables with an event trigger that pgmirror installs on the source database (needs a superuser source peer, PostgreSQL 14 or later): CREATE INDEX, DROP INDEX, ALTER INDEX ... RENAME, check/unique/exclusion constraints added or dropped, column defaults and NOT NULL are then applied on the destination in order with the rows. Without it, added, renamed and dropped columns still replicate from the stream. The trigger is shared by the mirrors of the source database and removed with the last of them."`
	SchemaChanges               db.SchemaChanges `json:"schema_changes,omitempty" default:"apply" doc:"What CDC does when a mapped source table's columns change (renamed, dropped, added, retyped): apply (default: the change is applied to the destination at its position in the stream and logged as Schema change applied; a type change that may have changed stored values resyncs that table beside running CDC), warn (a WARN is logged and the destination's schema is left as it is: dropped and renamed columns are kept and made nullable), or stop (the mirror is paused before the first change that would alter the destination's schema; switch the setting with PATCH /v1/mirrors/{name} or change the destination yourself, then resume). See docs/consistency.md, Schema changes."`
	Sequences                   []sequenceRef    `json:"sequences,omitempty" maxItems:"1000" doc:"Source sequences to keep in step on the destination besides those the mapped tables' columns own (serial, identity): for example one that several tables draw ids from through DEFAULT nextval(...). Each is created on the destination under the same name when missing, set after the snapshot, every SERVICE_SEQUENCE_SYNC_INTERVAL and exactly at a cut-over."`
}

// MirrorConfig is a mirror's configuration as the API returns it. It is
// exported because the mirror status embeds it: Huma leaves the fields of
// an embedded unexported type out of the OpenAPI schema.
type MirrorConfig struct {
	Name                        string           `json:"name"`
	SourcePeer                  string           `json:"source_peer"`
	DestinationPeer             string           `json:"destination_peer"`
	TableMappings               []tableMapping   `json:"table_mappings" doc:"The mappings as given: tables mapped by name, then schemas mapped as a whole (source_table and destination_table \"*\")."`
	ExpandedTableMappings       []tableMapping   `json:"expanded_table_mappings" doc:"The tables that schemas mapped as a whole (source_table \"*\") cover now, each to the table of the same name in the destination schema, including tables created on the source since; [] without such mappings."`
	SnapshotNumRowsPerPartition int              `json:"snapshot_num_rows_per_partition"`
	SnapshotMaxParallelWorkers  int              `json:"snapshot_max_parallel_workers"`
	SnapshotNumTablesInParallel int              `json:"snapshot_num_tables_in_parallel"`
	CDCSyncIntervalSeconds      int              `json:"cdc_sync_interval_seconds"`
	CDCBatchSize                int              `json:"cdc_batch_size"`
	DoInitialSnapshot           bool             `json:"do_initial_snapshot"`
	ExistingDestinationRows     db.ExistingRows  `json:"existing_destination_rows" doc:"What a table's first copy does with rows its destination table already holds."`
	SchemaChanges               db.SchemaChanges `json:"schema_changes" doc:"What CDC does when a mapped source table's columns change: apply, warn or stop (editable while paused with PATCH /v1/mirrors/{name})."`
	PublicationName             string           `json:"publication_name"`
	ReplicationSlotName         string           `json:"replication_slot_name"`
	Sequences                   []sequenceRef    `json:"sequences" doc:"Source sequences listed at creation, kept in step on the destination; [] for none."`
	CaptureDDL                  bool             `json:"capture_ddl" doc:"Schema changes of the mapped tables are captured by pgmirror's event trigger on the source and applied on the destination in order with the rows."`
	Status                      db.MirrorStatus  `json:"status"`
	CreatedAt                   time.Time        `json:"created_at"`
}

func configResponse(m db.Mirror, tables []db.MirrorTable) MirrorConfig {
	return MirrorConfig{
		Name: m.Name, SourcePeer: m.SourcePeer, DestinationPeer: m.DestinationPeer,
		TableMappings: givenMappings(tables, m.SchemaMappings), ExpandedTableMappings: expandedMappings(tables),
		SnapshotNumRowsPerPartition: m.SnapshotNumRowsPerPartition, SnapshotMaxParallelWorkers: m.SnapshotMaxParallelWorkers,
		SnapshotNumTablesInParallel: m.SnapshotNumTablesInParallel, CDCSyncIntervalSeconds: m.CDCSyncIntervalSeconds,
		CDCBatchSize: m.CDCBatchSize, DoInitialSnapshot: m.DoInitialSnapshot, ExistingDestinationRows: m.ExistingDestinationRows,
		SchemaChanges:   m.SchemaChanges,
		PublicationName: m.PublicationName, ReplicationSlotName: m.ReplicationSlotName, Sequences: sequencesResponse(m.Sequences),
		Status: m.Status, CreatedAt: m.CreatedAt, CaptureDDL: m.CaptureDDL,
	}
}

type mirrorCreateOutput struct {
	Body MirrorConfig
}

type mirrorSummary struct {
	Name            string           `json:"name"`
	SourcePeer      string           `json:"source_peer"`
	DestinationPeer string           `json:"destination_peer"`
	Status          db.MirrorStatus  `json:"status"`
	LastLSN         *string          `json:"last_lsn" doc:"Last replicated LSN (X/Y), null before the first."`
	ErrorMessage    *string          `json:"error_message" doc:"Set when status is error."`
	ErrorCount      int              `json:"error_count" doc:"Consecutive errors."`
	SchemaChanges   db.SchemaChanges `json:"schema_changes" doc:"What CDC does when a mapped source table's columns change."`
	SlotHealth
	WorkerInfo
	PeerWarnings
	LostChanges *LostChanges `json:"lost_changes" doc:"Set while tables may miss changes because the replication slot was missing, recreated, invalidated or moved on (docs/status.md, Lost changes); null otherwise."`
	RowsSynced  int64        `json:"rows_synced" doc:"Sum of the tables' rows_synced: rows copied by snapshots plus row changes applied by CDC (the mirror record's per-table counters, summed); its growth between two reads is the mirror's throughput."`
	CreatedAt   time.Time    `json:"created_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
}

type tableStatus struct {
	TableName     string            `json:"table_name" doc:"Source table, schema.table."`
	Status        db.TableStatus    `json:"status" doc:"dropped: the source table no longer exists; it does not replicate any more and its destination table is kept (docs/status.md)."`
	RowsSynced    int64             `json:"rows_synced"`
	RowsInserted  int64             `json:"rows_inserted"`
	RowsUpdated   int64             `json:"rows_updated"`
	RowsDeleted   int64             `json:"rows_deleted"`
	Truncates     int64             `json:"truncates" doc:"TRUNCATEs of the source table applied to the destination table during CDC."`
	LastSyncedAt  *time.Time        `json:"last_synced_at"`
	RowsEstimated *int64            `json:"rows_estimated" doc:"The source's row estimate when the table's last snapshot started; null before any."`
	Progress      *float64          `json:"progress" doc:"Snapshot progress, 0 to 1: rows_synced / rows_estimated (at most 0.99) while snapshotting, 1 once copied; null without a snapshot or an estimate."`
	LostChanges   *tableLostChanges `json:"lost_changes" doc:"Set while the table may miss changes (see the mirror's lost_changes); null otherwise."`
}

// snapshotProgress is how far along the snapshot of t is: rows copied over
// the estimate, capped at 0.99 while snapshotting, 1 once running; nil when
// the table was never snapshotted, the source had no estimate, or the table
// is pending or in error.
func snapshotProgress(t db.MirrorTable) *float64 {
	if t.RowsEstimated == nil {
		return nil
	}
	var p float64
	switch {
	case t.Status == db.TableStatusRunning:
		p = 1
	case t.Status == db.TableStatusSnapshotting && *t.RowsEstimated > 0:
		p = min(float64(t.RowsSynced)/float64(*t.RowsEstimated), 0.99)
	default:
		return nil
	}
	return &p
}

type mirrorStatus struct {
	MirrorConfig
	Verification    mirrorVerification `json:"verification" doc:"The verification interval and the latest completed verification (docs/api.md, Verification)."`
	DesiredState    db.DesiredState    `json:"desired_state" doc:"What the last control request asked for."`
	LastLSN         *string            `json:"last_lsn" doc:"Last replicated LSN (X/Y), null before the first."`
	LastSyncBatchID int64              `json:"last_sync_batch_id"`
	ErrorMessage    *string            `json:"error_message"`
	ErrorCount      int                `json:"error_count"`
	NextRetryAt     *time.Time         `json:"next_retry_at" doc:"When a mirror in error is retried next."`
	// SequencesSyncedAt is when the destination's sequences were last set
	// in step (engine/seqsync).
	SequencesSyncedAt *time.Time `json:"sequences_synced_at" doc:"When the sequences of the mirrored tables (serial and identity) were last set forward on the destination to the source's values: after the snapshot and every SERVICE_SEQUENCE_SYNC_INTERVAL (30 s) while CDC runs; null before the first time."`
	SlotHealth
	WorkerInfo
	PeerWarnings
	LostChanges *LostChanges   `json:"lost_changes" doc:"Set while tables may miss changes because the replication slot was missing, recreated, invalidated or moved on: the mirror is not proven equal, and a cut-over is refused, until those tables are resynced or a verification finds them equal (docs/status.md, Lost changes); null otherwise."`
	Cutover     *cutoverRecord `json:"cutover" doc:"The mirror's last cut-over (POST /v1/mirrors/{name}/cutover) with its steps; null before the first."`
	Tables      []tableStatus  `json:"tables"`
	UpdatedAt   time.Time      `json:"updated_at"`
}

// SlotHealth is the mirror's replication slot as the slot monitor last read
// it on the source (every 15 s); all null before the first reading.
// Exported for the same reason as MirrorConfig.
type SlotHealth struct {
	SlotLagBytes  *int64     `json:"slot_lag_bytes" doc:"WAL bytes the source keeps for this mirror (current WAL position minus the slot's confirmed_flush_lsn). Growing while running means the mirror falls behind; the source's disk fills by this much."`
	SlotWALStatus *string    `json:"slot_wal_status" doc:"wal_status of the slot on the source: reserved or extended is healthy, unreserved means WAL is about to be removed, lost means it was; missing means the slot does not exist."`
	SlotCheckedAt *time.Time `json:"slot_checked_at" doc:"When the slot was last read; an old value means the source could not be reached."`
	LagSeconds    *float64   `json:"lag_seconds" doc:"Seconds since the source commit of the oldest change the mirror has not applied yet; 0 when nothing is pending; null when unknown. While the mirror streams, its worker's measure, taken every second (heartbeats keep it true on an idle source); otherwise, and when the worker's last 0 is more than 5 s old, the time since the last applied commit while the slot holds unconfirmed WAL (an upper bound). The rule is in docs/status.md (Lag)."`
}

func slotHealthResponse(m db.Mirror) SlotHealth {
	return SlotHealth{SlotLagBytes: m.SlotLagBytes, SlotWALStatus: m.SlotWALStatus, SlotCheckedAt: m.SlotCheckedAt, LagSeconds: roundedLag(m.Lag(time.Now()))}
}

// roundedLag is lag rounded to milliseconds (nil stays nil).
func roundedLag(lag *float64) *float64 {
	if lag == nil {
		return nil
	}
	rounded := math.Round(*lag*1000) / 1000
	return &rounded
}

type mirrorStatusOutput struct {
	Body mirrorStatus
}

type mirrorPath struct {
	Name string `path:"name" doc:"Mirror name."`
}

func (h *handlers) registerMirrors(api huma.API) {
	register(api, authed, huma.Operation{
		OperationID: "list-mirrors", Method: http.MethodGet, Path: "/v1/mirrors", Tags: []string{"Mirrors"},
		Summary: "List mirrors", Description: "Every mirror with basic status, ordered by name. " +
			"Optional parameters filter (status, q), sort and page (limit, offset) the list; the response headers X-Total-Count " +
			"(mirrors matching the filter, all pages) and X-Status-Totals (mirrors of the whole fleet by status, whatever the filter) " +
			"let a client show a fleet of any size with one request (docs/api.md, Listing a fleet).",
		Errors: []int{http.StatusBadRequest},
	}, h.listMirrors)
	register(api, adminOnly, huma.Operation{
		OperationID: "create-mirror", Method: http.MethodPost, Path: "/v1/mirrors", Tags: []string{"Mirrors"}, MaxBodyBytes: mirrorMaxBody,
		Summary: "Create a mirror",
		Description: "Checks the source (wal_level=logical, mapped tables exist and have a primary key or REPLICA IDENTITY FULL), " +
			"stores the mirror with status initializing and starts it: initial snapshot (unless do_initial_snapshot is false), then CDC.",
		DefaultStatus: http.StatusCreated,
		Errors:        []int{http.StatusBadRequest, http.StatusConflict},
	}, h.createMirror)
	register(api, authed, huma.Operation{
		OperationID: "get-mirror", Method: http.MethodGet, Path: "/v1/mirrors/{name}", Tags: []string{"Mirrors"},
		Summary: "Get mirror status", Description: "Status, progress, per-table counters and configuration.",
		Errors: []int{http.StatusNotFound},
	}, h.getMirror)
	register(api, adminOnly, huma.Operation{
		OperationID: "delete-mirror", Method: http.MethodDelete, Path: "/v1/mirrors/{name}", Tags: []string{"Mirrors"},
		Summary: "Delete a mirror",
		Description: "The mirror disappears at once; a background job stops it and drops its replication slot and publication " +
			"on the source. Destination data is left as it is. Irreversible.",
		Errors: []int{http.StatusNotFound},
	}, h.deleteMirror)
}

// mirror loads a live mirror by name, answering 404 when there is none.
func (h *handlers) mirror(ctx context.Context, name string) (db.Mirror, error) {
	m, err := h.store.MirrorGetByName(ctx, name)
	if errors.Is(err, db.ErrNotFound) {
		return db.Mirror{}, notFoundMirror(name)
	}
	if err != nil {
		return db.Mirror{}, h.internal(ctx, "load the mirror", err)
	}
	return m, nil
}

func notFoundMirror(name string) error {
	return errorf(http.StatusNotFound, "Mirror %q does not exist", name)
}

func (h *handlers) getMirror(ctx context.Context, in *mirrorPath) (*mirrorStatusOutput, error) {
	m, err := h.mirror(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	tables, err := h.store.MirrorTables(ctx, m.ID)
	if err != nil {
		return nil, h.internal(ctx, "load the mirror's tables", err)
	}
	m = h.lagBoard.Newest(m)
	st := mirrorStatus{
		MirrorConfig: configResponse(m, tables), DesiredState: m.DesiredState,
		LastLSN: m.LastLSN, LastSyncBatchID: m.LastSyncBatchID, ErrorMessage: m.ErrorMessage, ErrorCount: m.ErrorCount,
		NextRetryAt: m.NextRetryAt, SequencesSyncedAt: m.SequencesSyncedAt, SlotHealth: slotHealthResponse(m), Cutover: cutoverResponse(m.Cutover), UpdatedAt: m.UpdatedAt, Tables: make([]tableStatus, 0, len(tables)),
	}
	workers, err := h.store.MirrorWorkers(ctx)
	if err != nil {
		return nil, h.internal(ctx, "read the mirror's worker", err)
	}
	st.WorkerInfo = withWorker(m, workers, h.lagBoard.Unsure(time.Now()), &st.SlotHealth)
	problems, err := h.peerProblems(ctx)
	if err != nil {
		return nil, err
	}
	st.PeerWarnings = peerWarningsOf(m, problems)
	st.LostChanges = lostChangesResponse(m)
	if st.Verification, err = h.mirrorVerification(ctx, m); err != nil {
		return nil, err
	}
	for _, t := range tables {
		st.Tables = append(st.Tables, tableStatus{
			TableName: change.TableName{Schema: t.SourceSchema, Name: t.SourceTable}.String(), Status: t.Status,
			RowsSynced: t.RowsSynced, RowsInserted: t.RowsInserted, RowsUpdated: t.RowsUpdated, RowsDeleted: t.RowsDeleted, Truncates: t.Truncates,
			LastSyncedAt: t.LastSyncedAt, RowsEstimated: t.RowsEstimated, Progress: snapshotProgress(t),
			LostChanges: tableLostChangesResponse(t),
		})
	}
	return &mirrorStatusOutput{Body: st}, nil
}

// validateMappings turns API mappings of single tables into engine
// mappings, rejecting duplicate source or destination tables and a table
// mapped onto itself when source and destination are the same peer.
// Mappings of whole schemas are left to validateSchemaMappings.
func validateMappings(in []tableMapping, samePeer bool) ([]change.Mapping, error) {
	if len(in) == 0 {
		return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings is empty: map at least one table")
	}
	out := make([]change.Mapping, 0, len(in))
	sources := map[change.TableName]int{}
	dests := map[change.TableName]int{}
	for i, t := range in {
		if isSchemaMapping(t) {
			continue
		}
		m := change.Mapping{
			Source:         change.TableName{Schema: t.SourceSchema, Name: t.SourceTable},
			Destination:    change.TableName{Schema: t.DestinationSchema, Name: t.DestinationTable},
			ExcludeColumns: t.ExcludeColumns,
		}
		if j, dup := sources[m.Source]; dup {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] and table_mappings[%d] both map source table %s: map each source table once", j, i, m.Source)
		}
		if j, dup := dests[m.Destination]; dup {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] and table_mappings[%d] both write to destination table %s: give each mapping its own destination table", j, i, m.Destination)
		}
		if samePeer && m.Source == m.Destination {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] would replicate %s onto itself (source and destination are the same peer): choose another destination table", i, m.Source)
		}
		if err := checkIdentifiers(i, t); err != nil {
			return nil, err
		}
		sources[m.Source], dests[m.Destination] = i, i
		out = append(out, m)
	}
	return out, nil
}

// maxIdentifierBytes is PostgreSQL's identifier length (NAMEDATALEN - 1):
// a longer name is silently truncated by the server, so it would never
// match the table or column meant.
const maxIdentifierBytes = 63

// checkIdentifiers checks that the names of mapping i are 1 to 63 bytes
// long (the schema counts characters; a name of multi-byte characters can
// pass it and still be too long).
func checkIdentifiers(i int, t tableMapping) error {
	names := []struct{ field, value string }{
		{"source_schema", t.SourceSchema}, {"source_table", t.SourceTable},
		{"destination_schema", t.DestinationSchema}, {"destination_table", t.DestinationTable},
	}
	for j, c := range t.ExcludeColumns {
		names = append(names, struct{ field, value string }{fmt.Sprintf("exclude_columns[%d]", j), c})
	}
	for _, n := range names {
		if n.value == "" {
			return errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d].%s is empty", i, n.field)
		}
		if len(n.value) > maxIdentifierBytes {
			return errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d].%s is %d bytes long; PostgreSQL names are at most %d bytes", i, n.field, len(n.value), maxIdentifierBytes)
		}
	}
	return nil
}

// checkSource connects to the source peer and runs the preflight checks on
// the mapped tables. Every failure is a 400 that says what to do.
func (h *handlers) checkSource(ctx context.Context, source db.Peer, mappings []change.Mapping, sequences []db.SequenceName) error {
	conn, err := h.connectPeer(ctx, source)
	if isRefusal(err) {
		return err
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "Could not reach the source peer %q: %s. Check that it is running and that its settings are right (POST /v1/peers/%s/test)", source.Name, err, source.Name)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tables := make([]change.TableName, len(mappings))
	for i, m := range mappings {
		tables[i] = m.Source
	}
	err = preflight.Check(qctx, conn, tables)
	if err == nil {
		err = checkSequences(qctx, conn, sequences)
	}
	if err == nil {
		err = ownership.Check(qctx, conn)
	}
	var f *preflight.Failure
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ownership.ErrForeignOwner):
		return errorf(http.StatusBadRequest, "Source peer %q is not ready: %s", source.Name, err)
	case errors.As(err, &f):
		return errorf(http.StatusBadRequest, "Source peer %q is not ready: %s", source.Name, f.Message)
	default:
		return errorf(http.StatusBadRequest, "Could not check the source peer %q: %s", source.Name, session.Scrub(err.Error(), conn.Config().Password))
	}
}

// checkSequences reports, as a preflight.Failure, a listed sequence that
// the source does not have.
func checkSequences(ctx context.Context, conn *pgx.Conn, sequences []db.SequenceName) error {
	for _, s := range sequences {
		name := change.TableName{Schema: s.Schema, Name: s.Name}
		_, err := schemasync.DescribeSequence(ctx, conn, name)
		if errors.Is(err, schemasync.ErrSequenceNotFound) {
			return &preflight.Failure{Check: "sequences", Message: fmt.Sprintf("sequence %s does not exist on the source (listed in sequences)", name)}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// samePeer reports whether two peers name the same database: the same peer,
// or two peers with the same host, port and database name. (Different
// spellings of one host, such as localhost and 127.0.0.1, are not detected.)
func samePeer(a, b db.Peer) bool {
	return a.ID == b.ID || (strings.EqualFold(a.Host, b.Host) && a.Port == b.Port && a.Database == b.Database)
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// generatedName returns prefix + the mirror name made into a lowercase
// identifier of at most 63 characters; a long name is cut and given a
// short hash so that different long names stay different.
func generatedName(prefix, mirror string) string {
	s := prefix + nonIdent.ReplaceAllString(strings.ToLower(mirror), "_")
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(mirror))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if len(s) > 63-len(suffix) {
		s = s[:63-len(suffix)]
	}
	return s + suffix
}

func (h *handlers) createMirror(ctx context.Context, in *mirrorCreateInput) (*mirrorCreateOutput, error) {
	b := &in.Body
	setAuditTarget(ctx, b.Name)
	setAuditDetails(ctx, map[string]any{"source_peer": b.SourcePeer, "destination_peer": b.DestinationPeer, "tables": len(b.TableMappings),
		"existing_destination_rows": string(existingRowsMode(string(b.ExistingDestinationRows)))})
	plan, err := h.planMirror(ctx, b)
	if err != nil {
		return nil, err
	}
	if err := h.checkMirrorPeers(ctx, b, &plan); err != nil {
		return nil, err
	}
	m, tables, err := h.insertMirror(ctx, b, plan)
	var apiErr *apiError
	switch {
	case errors.As(err, &apiErr):
		return nil, apiErr
	case db.Violates(err, db.ConstraintMirrorName):
		return nil, errorf(http.StatusConflict, "Mirror %q already exists: choose another name", b.Name)
	case err != nil:
		return nil, h.internal(ctx, "create the mirror", err)
	}
	h.logger.InfoContext(ctx, "mirror created", "mirror", m.Name, "slot", m.ReplicationSlotName, "publication", m.PublicationName,
		"user", currentUser(ctx).Username)
	return &mirrorCreateOutput{Body: configResponse(m, tables)}, nil
}

// mirrorPlan is a validated mirror creation request: its peers and what it
// maps, with whole schemas expanded into tables.
type mirrorPlan struct {
	source, dest db.Peer
	mappings     []change.Mapping
	fromSchema   map[change.TableName]bool
	schemas      []db.SchemaMapping
	sequences    []db.SequenceName
	mode         db.ExistingRows
	doSnapshot   bool
}

// planMirror validates a creation request without connecting to a peer:
// the peers exist, the mappings, schemas and sequences are well formed,
// and the mirror's name and its custom slot and publication names are free.
func (h *handlers) planMirror(ctx context.Context, b *mirrorCreateBody) (mirrorPlan, error) {
	var p mirrorPlan
	var err error
	if p.source, err = h.peerForMirror(ctx, "source", b.SourcePeer); err != nil {
		return p, err
	}
	if p.dest, err = h.peerForMirror(ctx, "destination", b.DestinationPeer); err != nil {
		return p, err
	}
	if p.mappings, err = validateMappings(b.TableMappings, samePeer(p.source, p.dest)); err != nil {
		return p, err
	}
	if p.schemas, err = validateSchemaMappings(b.TableMappings, samePeer(p.source, p.dest)); err != nil {
		return p, err
	}
	if p.sequences, err = validateSequences(b.Sequences); err != nil {
		return p, err
	}
	if _, err := h.store.MirrorGetByName(ctx, b.Name); err == nil {
		return p, errorf(http.StatusConflict, "Mirror %q already exists: choose another name", b.Name)
	} else if !errors.Is(err, db.ErrNotFound) {
		return p, h.internal(ctx, "check the mirror name", err)
	}
	// Fail fast on taken custom names, before connecting to the source; the
	// names are chosen for good under a lock in insertMirror.
	if _, _, err := chooseNames(ctx, h.store.MirrorUsingSlotOrPublication, b.Name, b.PublicationName, b.ReplicationSlotName); err != nil {
		var apiErr *apiError
		if errors.As(err, &apiErr) {
			return p, apiErr
		}
		return p, h.internal(ctx, "check the slot and publication names", err)
	}
	p.mode = existingRowsMode(string(b.ExistingDestinationRows))
	p.doSnapshot = b.DoInitialSnapshot == nil || *b.DoInitialSnapshot
	return p, nil
}

// peerForMirror loads the peer a creation request names in role.
func (h *handlers) peerForMirror(ctx context.Context, role, name string) (db.Peer, error) {
	peer, err := h.store.PeerGetByName(ctx, name)
	if errors.Is(err, db.ErrNotFound) {
		return peer, errorf(http.StatusBadRequest, "Invalid request: %s peer %q does not exist: create it with POST /v1/peers first", role, name)
	}
	if err != nil {
		return peer, h.internal(ctx, "load the "+role+" peer", err)
	}
	return peer, nil
}

// checkMirrorPeers checks a planned mirror against its peers: whole
// schemas expanded, the source's tables and settings, the DDL capture
// (installed last, so that no change made after the slot is missed), no
// loop with another mirror, and a destination that can take the copy.
func (h *handlers) checkMirrorPeers(ctx context.Context, b *mirrorCreateBody, p *mirrorPlan) error {
	var err error
	if p.mappings, p.fromSchema, err = h.expandSchemas(ctx, p.source, p.mappings, p.schemas); err != nil {
		return err
	}
	if err := h.checkSource(ctx, p.source, p.mappings, p.sequences); err != nil {
		return err
	}
	if b.CaptureDDL {
		if err := h.ddlCapture(ctx, p.source, false); err != nil {
			return err
		}
	}
	// A loop with another mirror is refused whatever the destination holds.
	if err := h.refuseCycle(ctx, 0, p.source, p.dest, p.mappings); err != nil {
		return err
	}
	// A destination peer stored before the catalog check existed (or while
	// it could not be reached) must not be the catalog either; its tables
	// must not hold rows the first copy would replace unasked.
	if err := h.checkDestination(ctx, p.dest, p.mappings, p.mode, p.doSnapshot); err != nil {
		return err
	}
	if b.CaptureDDL {
		// Installed before the mirror exists, so that no change made on
		// the source after its slot is missed.
		if err := h.ddlCapture(ctx, p.source, true); err != nil {
			return err
		}
	}
	return nil
}

// insertMirror writes the planned mirror and its tables to the catalog and
// enqueues its first run, in one audited transaction.
func (h *handlers) insertMirror(ctx context.Context, b *mirrorCreateBody, p mirrorPlan) (m db.Mirror, tables []db.MirrorTable, err error) {
	err = h.auditedTx(ctx, func(tx pgx.Tx) error {
		// Under this lock no other mirror can take the names between the
		// check and the insert.
		if err := h.store.With(tx).LockMirrorNames(ctx); err != nil {
			return err
		}
		pub, slot, err := chooseNames(ctx, func(ctx context.Context, slot, pub string) (string, error) {
			return h.store.With(tx).MirrorUsingSlotOrPublication(ctx, slot, pub)
		}, b.Name, b.PublicationName, b.ReplicationSlotName)
		if err != nil {
			return err
		}
		m, err = h.store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{
			SchemaMappings: p.schemas, FromSchema: p.fromSchema,
			Name: b.Name, SourcePeerID: p.source.ID, DestinationPeerID: p.dest.ID,
			SnapshotNumRowsPerPartition: b.SnapshotNumRowsPerPartition, SnapshotMaxParallelWorkers: b.SnapshotMaxParallelWorkers,
			SnapshotNumTablesInParallel: b.SnapshotNumTablesInParallel, CDCSyncIntervalSeconds: b.CDCSyncIntervalSeconds,
			CDCBatchSize: b.CDCBatchSize, DoInitialSnapshot: p.doSnapshot, ExistingDestinationRows: p.mode,
			PublicationName: pub, ReplicationSlotName: slot, Tables: p.mappings, Sequences: p.sequences,
			CaptureDDL:    b.CaptureDDL,
			SchemaChanges: b.SchemaChanges,
		})
		if err != nil {
			return err
		}
		if tables, err = h.store.With(tx).MirrorTables(ctx, m.ID); err != nil {
			return err
		}
		return h.enqueueRun(ctx, tx, m.ID)
	})
	return m, tables, err
}

// chooseNames returns the publication and replication slot names of a new
// mirror: the custom ones, or names generated from the mirror's name. using
// reports the mirror that already uses a slot or publication name ("" for
// none). A custom name in use is a 409; generated names in use (a deleted
// mirror of the same name may still be cleaning up, or another name maps to
// the same identifier) get a random suffix.
func chooseNames(ctx context.Context, using func(ctx context.Context, slot, pub string) (string, error), mirror, customPub, customSlot string) (string, string, error) {
	pub, slot := customPub, customSlot
	if pub == "" {
		pub = generatedName("pgmirror_pub_", mirror)
	}
	if slot == "" {
		slot = generatedName("pgmirror_slot_", mirror)
	}
	basePub, baseSlot := pub, slot
	for attempt := 0; ; attempt++ {
		user, err := using(ctx, slot, pub)
		if err != nil {
			return "", "", err
		}
		if user == "" {
			return pub, slot, nil
		}
		if customPub != "" || customSlot != "" {
			return "", "", errorf(http.StatusConflict, "Mirror %q already uses replication slot %q or publication %q: choose other names", user, slot, pub)
		}
		if attempt == 10 {
			return "", "", fmt.Errorf("no free generated slot and publication names for mirror %q after %d attempts", mirror, attempt)
		}
		suffix := "_" + randomHex(4)
		pub = truncate(basePub, 63-len(suffix)) + suffix
		slot = truncate(baseSlot, 63-len(suffix)) + suffix
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// enqueueRun enqueues the job that drives the mirror, inside tx.
func (h *handlers) enqueueRun(ctx context.Context, tx pgx.Tx, mirrorID int64) error {
	if _, err := h.river.InsertTx(ctx, tx, jobs.MirrorRunArgs{MirrorID: mirrorID}, nil); err != nil {
		return fmt.Errorf("enqueue run job for mirror %d: %w", mirrorID, err)
	}
	return nil
}

func (h *handlers) deleteMirror(ctx context.Context, in *mirrorPath) (*deletedOutput, error) {
	err := h.auditedTx(ctx, func(tx pgx.Tx) error {
		m, err := h.store.With(tx).MirrorGetByNameForUpdate(ctx, in.Name)
		if err != nil {
			return err
		}
		if err := h.store.With(tx).MirrorSoftDelete(ctx, m.ID); err != nil {
			return err
		}
		if _, err := h.river.InsertTx(ctx, tx, jobs.MirrorCleanupArgs{MirrorID: m.ID}, nil); err != nil {
			return fmt.Errorf("enqueue cleanup job for mirror %d: %w", m.ID, err)
		}
		return nil
	})
	if errors.Is(err, db.ErrNotFound) {
		return nil, notFoundMirror(in.Name)
	}
	if err != nil {
		return nil, h.internal(ctx, "delete the mirror", err)
	}
	h.logger.InfoContext(ctx, "mirror deleted", "mirror", in.Name, "user", currentUser(ctx).Username)
	return deleted(in.Name), nil
}
