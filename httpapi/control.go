package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
)

type statusMessageOutput struct {
	Body struct {
		Message string          `json:"message"`
		Status  db.DesiredState `json:"status"`
	}
}

type tableMessageOutput struct {
	Body struct {
		Message string `json:"message"`
		Table   string `json:"table" doc:"schema.table"`
	}
}

type tableResyncInput struct {
	Name  string `path:"name" doc:"Mirror name."`
	Table string `path:"table" doc:"Source table as schema.table."`
}

type tablesPutInput struct {
	Name string `path:"name" doc:"Mirror name."`
	Body struct {
		TableMappings           []tableMapping  `json:"table_mappings" minItems:"1" maxItems:"1000" doc:"The complete desired set of mappings (at most 1000)."`
		ExistingDestinationRows db.ExistingRows `json:"existing_destination_rows,omitempty" doc:"Changes the mirror's existing_destination_rows (absent: unchanged). What a table's first copy does with rows its destination table already holds: refuse (default: the request is refused with 409 naming the tables, and a worker that finds rows there before copying fails the mirror instead of copying), truncate (the table is emptied first), or keep (the rows stay and the source's rows are copied over them with upserts by primary key, for a destination that holds an older copy; 409 for a table with rows but no primary key). Later copies (resync, a restarted copy) always truncate. Without an initial snapshot nothing is copied and the rows stay."`
	}
}

type tablesOutput struct {
	Body []tableMapping
}

func (h *handlers) registerControl(api huma.API) {
	control := func(id, path, summary, desc string, handler func(context.Context, *mirrorPath) (*messageOutput, error)) {
		register(api, adminOnly, huma.Operation{
			OperationID: id, Method: http.MethodPost, Path: "/v1/mirrors/{name}/" + path, Tags: []string{"Mirror control"},
			Summary: summary, Description: desc, Errors: []int{http.StatusNotFound, http.StatusConflict},
		}, handler)
	}
	register(api, adminOnly, huma.Operation{
		OperationID: "pause-mirror", Method: http.MethodPost, Path: "/v1/mirrors/{name}/pause", Tags: []string{"Mirror control"},
		Summary: "Pause a mirror",
		Description: "Stops CDC; the replication slot keeps its position. Allowed from running and error; 409 when already paused " +
			"or while an operation is in progress (initializing, snapshotting, a resync or schema sync, stopped).",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, h.pause)
	register(api, adminOnly, huma.Operation{
		OperationID: "resume-mirror", Method: http.MethodPost, Path: "/v1/mirrors/{name}/resume", Tags: []string{"Mirror control"},
		Summary: "Resume a paused mirror", Description: "CDC continues from the last replicated LSN. 409 unless the mirror is paused.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, h.resume)
	control("resync-mirror", "resync", "Resync all tables",
		"Truncates every destination table and snapshots it again, then continues CDC. A paused mirror resumes to do it. "+
			"409 while initializing, snapshotting or stopped.", h.resync)
	register(api, adminOnly, huma.Operation{
		OperationID: "resync-table", Method: http.MethodPost, Path: "/v1/mirrors/{name}/resync/{table}", Tags: []string{"Mirror control"},
		Summary:     "Resync one table",
		Description: "Truncates and snapshots one table again ({table} is the source schema.table); other tables continue CDC. On a paused mirror the table is resynced once the mirror is resumed. 409 while initializing, snapshotting or stopped.",
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, h.resyncTable)
	control("retry-mirror", "retry", "Retry a failed mirror now",
		"Restarts a mirror in error at once instead of waiting for the backoff. 409 unless status is error.", h.retry)
	control("sync-schema", "sync-schema", "Synchronise the destination schema",
		"Brings destination columns up to the source's (added columns, changed types) without resyncing data. "+
			"A paused mirror resumes to do it. 409 while initializing, snapshotting or stopped.", h.syncSchema)
	register(api, authed, huma.Operation{
		OperationID: "get-mirror-tables", Method: http.MethodGet, Path: "/v1/mirrors/{name}/tables", Tags: []string{"Mirror control"},
		Summary: "List a mirror's table mappings", Errors: []int{http.StatusNotFound},
	}, h.getTables)
	register(api, adminOnly, huma.Operation{
		OperationID: "put-mirror-tables", Method: http.MethodPut, Path: "/v1/mirrors/{name}/tables", Tags: []string{"Mirror control"}, MaxBodyBytes: mirrorMaxBody,
		Summary: "Replace a mirror's table mappings",
		Description: "table_mappings is the complete desired set: mappings of source tables that stay keep their progress, " +
			"removed ones are dropped from the mirror, new ones are snapshotted when the mirror resumes, after the same check of their destination tables as at creation " +
			"(409 naming the tables that hold rows under existing_destination_rows refuse). The mirror must be paused (409 otherwise).",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, h.putTables)
	register(api, authed, huma.Operation{
		OperationID: "available-tables", Method: http.MethodGet, Path: "/v1/mirrors/{name}/available-tables", Tags: []string{"Mirror control"},
		Summary: "Source tables not yet in the mirror", Errors: []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.availableTables)
}

// controlTx runs fn in a transaction holding the live mirror's row lock,
// and writes the request's audit entry in it. A missing mirror is a 404.
func (h *handlers) controlTx(ctx context.Context, name string, fn func(tx pgx.Tx, m db.Mirror) error) error {
	err := h.auditedTx(ctx, func(tx pgx.Tx) error {
		m, err := h.store.With(tx).MirrorGetByNameForUpdate(ctx, name)
		if err != nil {
			return err
		}
		return fn(tx, m)
	})
	var apiErr *apiError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, db.ErrNotFound):
		return notFoundMirror(name)
	default:
		return h.internal(ctx, "change the mirror", err)
	}
}

// busy returns a 409 when the mirror is in a state where no other control
// operation may start (db.Mirror.ControlBlocked).
func busy(m db.Mirror, tables []db.MirrorTable, what string) error {
	if reason := m.ControlBlocked(tables); reason != "" {
		return errorf(http.StatusConflict, "Cannot %s mirror %q: %s", what, m.Name, reason)
	}
	return nil
}

func (h *handlers) pause(ctx context.Context, in *mirrorPath) (*statusMessageOutput, error) {
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, m db.Mirror) error {
		if m.Status == db.StatusPaused {
			return errorf(http.StatusConflict, "Mirror %q is already paused", m.Name)
		}
		tables, err := h.store.With(tx).MirrorTables(ctx, m.ID)
		if err != nil {
			return err
		}
		if err := busy(m, tables, "pause"); err != nil {
			return err
		}
		if err := h.store.With(tx).MirrorPause(ctx, m.ID); err != nil {
			return err
		}
		return h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, db.MsgMirrorPaused, actor(ctx, nil))
	})
	if err != nil {
		return nil, err
	}
	out := &statusMessageOutput{}
	out.Body.Message = fmt.Sprintf("Mirror %q paused; its replication slot keeps its position", in.Name)
	out.Body.Status = db.DesiredPaused
	return out, nil
}

// pauseSettleWait bounds how long a resume waits for the run that was
// live when the mirror was paused to stop.
const pauseSettleWait = 20 * time.Second

// waitPausedRun waits until no run of the paused mirror name holds its lock.
// A pause takes effect at the run's next batch boundary; a resume that came
// before it would let that run go on with the settings it started with (a
// PATCH made while paused, a trigger to install again) instead of starting
// a new one. It answers 409 when the run is still there after
// pauseSettleWait.
func (h *handlers) waitPausedRun(ctx context.Context, name string) error {
	m, err := h.store.MirrorGetByName(ctx, name)
	if errors.Is(err, db.ErrNotFound) {
		return notFoundMirror(name)
	}
	if err != nil {
		return h.internal(ctx, "read the mirror", err)
	}
	if m.Status != db.StatusPaused {
		return nil // the transaction below answers
	}
	lock, err := h.store.MirrorLockWait(ctx, m.ID, pauseSettleWait)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errorf(http.StatusConflict, "Mirror %q is still stopping after its pause (its run has not reached a batch boundary in %s); try the resume again in a moment", name, pauseSettleWait)
	}
	lock.Release()
	return nil
}

func (h *handlers) resume(ctx context.Context, in *mirrorPath) (*statusMessageOutput, error) {
	if err := h.waitPausedRun(ctx, in.Name); err != nil {
		return nil, err
	}
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, m db.Mirror) error {
		if m.Status != db.StatusPaused {
			return errorf(http.StatusConflict, "Mirror %q is not paused (status %s): only a paused mirror can be resumed", m.Name, m.Status)
		}
		if err := h.store.With(tx).MirrorResume(ctx, m.ID); err != nil {
			return err
		}
		if err := h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, db.MsgMirrorResumed, actor(ctx, nil)); err != nil {
			return err
		}
		return h.enqueueRun(ctx, tx, m.ID)
	})
	if err != nil {
		return nil, err
	}
	out := &statusMessageOutput{}
	out.Body.Message = fmt.Sprintf("Mirror %q resumed; CDC continues from the last replicated LSN", in.Name)
	out.Body.Status = db.DesiredRunning
	return out, nil
}

// requestAction records a resync or schema sync for the mirror's worker.
func (h *handlers) requestAction(ctx context.Context, name string, action db.PendingAction, what, logMsg string) (wasPaused bool, err error) {
	err = h.controlTx(ctx, name, func(tx pgx.Tx, m db.Mirror) error {
		tables, err := h.store.With(tx).MirrorTables(ctx, m.ID)
		if err != nil {
			return err
		}
		if err := busy(m, tables, what); err != nil {
			return err
		}
		wasPaused = m.Status == db.StatusPaused || m.DesiredState == db.DesiredPaused
		if err := h.store.With(tx).MirrorRequestAction(ctx, m.ID, action); err != nil {
			return err
		}
		if wasPaused {
			if err := h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, db.MsgMirrorResumed, actor(ctx, map[string]string{"reason": what})); err != nil {
				return err
			}
		}
		if logMsg != "" {
			if err := h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, logMsg, actor(ctx, nil)); err != nil {
				return err
			}
		}
		return h.enqueueRun(ctx, tx, m.ID)
	})
	return wasPaused, err
}

func (h *handlers) resync(ctx context.Context, in *mirrorPath) (*messageOutput, error) {
	wasPaused, err := h.requestAction(ctx, in.Name, db.ActionResync, "resync", "")
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("Resync of mirror %q started: every destination table is truncated and snapshotted again, then CDC continues", in.Name)
	if wasPaused {
		msg += "; the mirror was paused and resumes to do this"
	}
	return message(msg), nil
}

func (h *handlers) syncSchema(ctx context.Context, in *mirrorPath) (*messageOutput, error) {
	wasPaused, err := h.requestAction(ctx, in.Name, db.ActionSyncSchema, "sync the schema of", db.MsgSchemaSyncInitiated)
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("Schema sync of mirror %q initiated: destination columns are brought up to the source's, then CDC continues", in.Name)
	if wasPaused {
		msg += "; the mirror was paused and resumes to do this"
	}
	return message(msg), nil
}

func (h *handlers) resyncTable(ctx context.Context, in *tableResyncInput) (*tableMessageOutput, error) {
	if !strings.Contains(in.Table, ".") {
		return nil, errorf(http.StatusBadRequest, "Invalid request: table %q is not schema.table (for example public.orders)", in.Table)
	}
	var src change.TableName
	var paused bool
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, m db.Mirror) error {
		paused = m.Status == db.StatusPaused || m.DesiredState == db.DesiredPaused
		tables, err := h.store.With(tx).MirrorTables(ctx, m.ID)
		if err != nil {
			return err
		}
		found, dropped := false, false
		for _, t := range tables {
			if name := (change.TableName{Schema: t.SourceSchema, Name: t.SourceTable}); name.String() == in.Table {
				src, found, dropped = name, true, t.Status == db.TableStatusDropped
			}
		}
		if !found {
			return errorf(http.StatusNotFound, "Mirror %q has no source table %s: see GET /v1/mirrors/%s/tables", m.Name, in.Table, m.Name)
		}
		if dropped {
			return errorf(http.StatusConflict, "Cannot resync table %s of mirror %q: it was dropped on the source (status dropped); a table of that name created on the source again is copied by itself", in.Table, m.Name)
		}
		if err := busy(m, tables, "resync a table of"); err != nil {
			return err
		}
		if err := h.store.With(tx).MirrorTableRequestResync(ctx, m.ID, src); err != nil {
			return err
		}
		setAuditDetails(ctx, map[string]any{"table": src.String()})
		if err := h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, db.MsgTableResyncStarted, actor(ctx, map[string]string{"table": src.String()})); err != nil {
			return err
		}
		return h.enqueueRun(ctx, tx, m.ID)
	})
	if err != nil {
		return nil, err
	}
	out := &tableMessageOutput{}
	out.Body.Message = fmt.Sprintf("Resync of table %s in mirror %q started: it is truncated and snapshotted again while other tables continue CDC", src, in.Name)
	if paused {
		// Unlike a full resync, a table resync does not resume a paused mirror.
		out.Body.Message = fmt.Sprintf("Resync of table %s in mirror %q requested: the mirror is paused, so the table is truncated and snapshotted again when it is resumed", src, in.Name)
	}
	out.Body.Table = src.String()
	return out, nil
}

func (h *handlers) retry(ctx context.Context, in *mirrorPath) (*messageOutput, error) {
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, m db.Mirror) error {
		if m.Status != db.StatusError {
			return errorf(http.StatusConflict, "Mirror %q is not in error (status %s): retry is only for a failed mirror", m.Name, m.Status)
		}
		if err := h.store.With(tx).MirrorRequestRetry(ctx, m.ID); err != nil {
			return err
		}
		if err := h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, db.MsgRetrySignal, actor(ctx, nil)); err != nil {
			return err
		}
		return h.enqueueRun(ctx, tx, m.ID)
	})
	if err != nil {
		return nil, err
	}
	return message(fmt.Sprintf("Retry signal sent to mirror %q: it restarts now without waiting for the backoff", in.Name)), nil
}

func (h *handlers) getTables(ctx context.Context, in *mirrorPath) (*tablesOutput, error) {
	m, err := h.mirror(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	tables, err := h.store.MirrorTables(ctx, m.ID)
	if err != nil {
		return nil, h.internal(ctx, "load the mirror's tables", err)
	}
	return &tablesOutput{Body: givenMappings(tables, m.SchemaMappings)}, nil
}

// runStopWait bounds how long PUT tables waits for a paused mirror's run to
// stop.
const runStopWait = 30 * time.Second

func (h *handlers) putTables(ctx context.Context, in *tablesPutInput) (*tablesOutput, error) {
	m, err := h.mirror(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	if m.Status != db.StatusPaused {
		return nil, errorf(http.StatusConflict, "Mirror %q is not paused (status %s): pause it with POST /v1/mirrors/%s/pause before changing its tables", m.Name, m.Status, m.Name)
	}
	source, dest, err := h.mirrorPeers(ctx, m)
	if err != nil {
		return nil, err
	}
	mappings, schemas, fromSchema, err := h.tablesRequested(ctx, in.Body.TableMappings, source, dest)
	if err != nil {
		return nil, err
	}
	setAuditDetails(ctx, map[string]any{"tables": len(mappings)})
	mode := m.ExistingDestinationRows
	if in.Body.ExistingDestinationRows != "" {
		mode = db.ExistingRows(in.Body.ExistingDestinationRows)
		setAuditDetails(ctx, map[string]any{"existing_destination_rows": string(mode)})
	}
	if err := h.checkSource(ctx, source, mappings, nil); err != nil {
		return nil, err
	}
	if err := h.refuseCycle(ctx, m.ID, source, dest, mappings); err != nil {
		return nil, err
	}
	current, err := h.store.MirrorTables(ctx, m.ID)
	if err != nil {
		return nil, h.internal(ctx, "load the mirror's tables", err)
	}
	// New tables get their first copy when the mirror resumes (unless it
	// skips initial snapshots).
	if err := h.checkDestination(ctx, dest, newDestinations(current, mappings), mode, m.DoInitialSnapshot); err != nil {
		return nil, err
	}
	// Paused answers at once, but the mirror's run may still be finishing
	// its last batch: wait until it let go of the mirror (its lock), so
	// that no change of a removed table is applied with the old tables
	// after this answers.
	lock, err := h.store.MirrorLockWait(ctx, m.ID, runStopWait)
	if errors.Is(err, db.ErrUnavailable) {
		return nil, h.internal(ctx, "wait for the mirror's run to stop", err)
	}
	if err != nil {
		return nil, errorf(http.StatusConflict, "Mirror %q is still finishing its last batch after the pause: try again in a few seconds", m.Name)
	}
	defer lock.Release()
	var tables []db.MirrorTable
	err = h.controlTx(ctx, in.Name, func(tx pgx.Tx, locked db.Mirror) error {
		// The source check took time: the mirror must still be the same and paused.
		if locked.ID != m.ID || locked.Status != db.StatusPaused {
			return errorf(http.StatusConflict, "Mirror %q changed while its tables were checked (status %s): pause it and try again", locked.Name, locked.Status)
		}
		if mode != locked.ExistingDestinationRows {
			if err := h.store.With(tx).MirrorSetExistingDestinationRows(ctx, m.ID, mode); err != nil {
				return err
			}
		}
		var err error
		tables, err = h.store.With(tx).MirrorTablesReplaceWithSchemas(ctx, m.ID, mappings, schemas, fromSchema)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &tablesOutput{Body: givenMappings(tables, schemas)}, nil
}

// mirrorPeers loads the source and destination peers of mirror m.
func (h *handlers) mirrorPeers(ctx context.Context, m db.Mirror) (source, dest db.Peer, err error) {
	if source, err = h.store.PeerGetByID(ctx, m.SourcePeerID); err != nil {
		return source, dest, h.internal(ctx, "load the source peer", err)
	}
	if dest, err = h.store.PeerGetByID(ctx, m.DestinationPeerID); err != nil {
		return source, dest, h.internal(ctx, "load the destination peer", err)
	}
	return source, dest, nil
}

// tablesRequested validates the table and schema mappings of a request and
// expands the schema mappings into the source tables they map now (those
// are returned in fromSchema too).
func (h *handlers) tablesRequested(ctx context.Context, given []tableMapping, source, dest db.Peer) (
	mappings []change.Mapping, schemas []db.SchemaMapping, fromSchema map[change.TableName]bool, err error) {
	if mappings, err = validateMappings(given, samePeer(source, dest)); err != nil {
		return nil, nil, nil, err
	}
	if schemas, err = validateSchemaMappings(given, samePeer(source, dest)); err != nil {
		return nil, nil, nil, err
	}
	mappings, fromSchema, err = h.expandSchemas(ctx, source, mappings, schemas)
	return mappings, schemas, fromSchema, err
}

func (h *handlers) availableTables(ctx context.Context, in *mirrorPath) (*tableListOutput, error) {
	m, err := h.mirror(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	mapped, err := h.store.MirrorTables(ctx, m.ID)
	if err != nil {
		return nil, h.internal(ctx, "load the mirror's tables", err)
	}
	source, err := h.store.PeerGetByID(ctx, m.SourcePeerID)
	if err != nil {
		return nil, h.internal(ctx, "load the source peer", err)
	}
	all, err := h.listPeerTables(ctx, source)
	if err != nil {
		return nil, err
	}
	inMirror := map[change.TableName]bool{}
	for _, t := range mapped {
		inMirror[change.TableName{Schema: t.SourceSchema, Name: t.SourceTable}] = true
	}
	out := &tableListOutput{Body: []tableRef{}}
	for _, t := range all {
		if !inMirror[t] {
			out.Body = append(out.Body, tableRef{Schema: t.Schema, TableName: t.Name})
		}
	}
	return out, nil
}
