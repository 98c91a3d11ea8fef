package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/verify"
	"github.com/pgmirror/pgmirror/jobs"
)

type verifyInput struct {
	Name string `path:"name" doc:"Mirror name."`
	Body *struct {
		Tables []string `json:"tables,omitempty" maxItems:"1000" doc:"Source tables (schema.table) to compare; default every table of the mirror."`
	}
}

type verificationPath struct {
	Name string `path:"name" doc:"Mirror name."`
	ID   int64  `path:"id" doc:"Verification id."`
}

type verificationsListInput struct {
	Name  string `path:"name" doc:"Mirror name."`
	Limit int    `query:"limit" default:"20" minimum:"1" maximum:"100" doc:"At most this many, newest first."`
}

// verificationTable is one table's outcome.
type verificationTable struct {
	Table           string   `json:"table" doc:"Source table (schema.table)."`
	Destination     string   `json:"destination" doc:"Destination table (schema.table)."`
	Method          string   `json:"method" enum:"key_ranges,multiset," doc:"key_ranges (primary key) or multiset (no primary key); empty when skipped."`
	RowsSource      int64    `json:"rows_source"`
	RowsDestination int64    `json:"rows_destination"`
	Chunks          int      `json:"chunks" doc:"Key ranges (or hash buckets) compared."`
	ChunksDiffering int      `json:"chunks_differing"`
	RowsDiffering   int64    `json:"rows_differing" doc:"Rows missing, extra or different on the destination."`
	Missing         []string `json:"missing" doc:"Up to 10 keys, (columns)=(values), of source rows missing on the destination; for tables without a primary key, the rows."`
	Extra           []string `json:"extra" doc:"Up to 10 keys of destination rows that the source does not have."`
	Different       []string `json:"different" doc:"Up to 10 keys of rows whose values differ."`
	Skipped         string   `json:"skipped,omitempty" doc:"Why the table was not compared."`
	DurationMS      int64    `json:"duration_ms"`
}

// verification is a verification as the API shows it.
type verification struct {
	ID            int64                `json:"id"`
	RepairOf      *int64               `json:"repair_of" doc:"The verification whose differences this one repaired first (null for a plain verification)."`
	Mirror        string               `json:"mirror"`
	State         db.VerificationState `json:"state"`
	LSN           *string              `json:"lsn" doc:"The source position both sides were compared at (null until known)."`
	RequestedBy   string               `json:"requested_by,omitempty"`
	StartedAt     time.Time            `json:"started_at"`
	FinishedAt    *time.Time           `json:"finished_at"`
	Error         *string              `json:"error"`
	RowsDiffering *int64               `json:"rows_differing" doc:"Rows differing over all tables, once done."`
	Tables        []verificationTable  `json:"tables"`
	// ReverseMirrorProblems is a pointer so that "not checked" is null.
	ReverseMirrorProblems *[]string `json:"reverse_mirror_problems" doc:"What would keep a cut-over from creating a reverse mirror (reverse_mirror_name) from the destination back to the source, checked with every verification: wal_level, the destination user's REPLICATION and rights to publish the tables, free slots and WAL senders, tables that identify their rows, and the source user's right to write into read-only tables. [] when a reverse mirror can be created; null until checked (or when the check could not run)."`
}

func toVerification(m db.Mirror, v db.Verification) verification {
	out := verification{ID: v.ID, RepairOf: v.RepairOf, Mirror: m.Name, State: v.State, RequestedBy: v.RequestedBy, StartedAt: v.StartedAt,
		FinishedAt: v.FinishedAt, RowsDiffering: v.RowsDiffering, Tables: []verificationTable{}}
	if v.LSN != "" {
		out.LSN = &v.LSN
	}
	if v.Error != "" {
		out.Error = &v.Error
	}
	if v.ReverseMirrorProblems != nil {
		out.ReverseMirrorProblems = &v.ReverseMirrorProblems
	}
	if len(v.Result) > 0 {
		_ = json.Unmarshal(v.Result, &out.Tables)
	}
	for i := range out.Tables {
		t := &out.Tables[i]
		t.Missing, t.Extra, t.Different = nonNilStrings(t.Missing), nonNilStrings(t.Extra), nonNilStrings(t.Different)
	}
	return out
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type verificationOutput struct {
	Status int
	Body   verification
}

type verificationsOutput struct {
	Body []verification
}

func (h *handlers) registerVerify(api huma.API) {
	h.registerVerifyInterval(api)
	register(api, adminOnly, huma.Operation{
		OperationID: "verify-mirror", Method: http.MethodPost, Path: "/v1/mirrors/{name}/verify", Tags: []string{"Verification"},
		Summary: "Compare the destination with the source at one source position",
		Description: "Starts a verification and answers 202 with its id: while CDC runs, both sides are compared as of one source position " +
			"(the mirror is held there for an instant), by hashes of key ranges computed inside each database. The mirror must be running " +
			"(409 otherwise, or while another verification of it runs). Follow it with GET /v1/mirrors/{name}/verifications/{id}. " +
			"See docs/consistency.md.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, h.verify)
	register(api, authed, huma.Operation{
		OperationID: "list-verifications", Method: http.MethodGet, Path: "/v1/mirrors/{name}/verifications", Tags: []string{"Verification"},
		Summary: "List a mirror's verifications", Description: "Newest first.",
		Errors: []int{http.StatusNotFound},
	}, h.listVerifications)
	register(api, authed, huma.Operation{
		OperationID: "get-verification", Method: http.MethodGet, Path: "/v1/mirrors/{name}/verifications/{id}", Tags: []string{"Verification"},
		Summary: "Show one verification", Description: "Its state, the source position compared at, and per table the counts and example keys of differences.",
		Errors: []int{http.StatusNotFound},
	}, h.getVerification)
	register(api, adminOnly, huma.Operation{
		OperationID: "repair-verification", Method: http.MethodPost, Path: "/v1/mirrors/{name}/verifications/{id}/repair", Tags: []string{"Verification"},
		Summary: "Copy again only what a verification found different, then verify again",
		Description: "Starts a new verification (202) that first copies the source rows of the key ranges where verification {id} found " +
			"differences over the destination's rows beside running CDC (in transactions of about a second, each at a source position of its own), " +
			"and then compares those tables again. " +
			"409 unless verification {id} is done and found differences in tables with a primary key (tables without one, or with more " +
			"than 1000 differing ranges, need POST /v1/mirrors/{name}/resync/{table}), or when the mirror is not running or another verification runs.",
		DefaultStatus: http.StatusAccepted,
		Errors:        []int{http.StatusNotFound, http.StatusConflict},
	}, h.repairVerification)
	register(api, adminOnly, huma.Operation{
		OperationID: "cancel-verification", Method: http.MethodDelete, Path: "/v1/mirrors/{name}/verifications/{id}", Tags: []string{"Verification"},
		Summary: "Cancel a running verification", Description: "409 when it has already ended.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, h.cancelVerification)
}

// verificationTx runs fn in a control transaction of the mirror (see
// controlTx) and answers with the verification it returns.
func (h *handlers) verificationTx(ctx context.Context, name string, status int,
	fn func(tx pgx.Tx, store *db.Store, m db.Mirror) (db.Verification, error)) (*verificationOutput, error) {
	var out verification
	err := h.controlTx(ctx, name, func(tx pgx.Tx, m db.Mirror) error {
		v, err := fn(tx, h.store.With(tx), m)
		if err != nil {
			return err
		}
		out = toVerification(m, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &verificationOutput{Status: status, Body: out}, nil
}

// verificationTxOf is verificationTx on the verification in.ID of the
// mirror, loaded for fn (404 when the mirror has none).
func (h *handlers) verificationTxOf(ctx context.Context, in *verificationPath, status int,
	fn func(tx pgx.Tx, store *db.Store, m db.Mirror, v db.Verification) (db.Verification, error)) (*verificationOutput, error) {
	return h.verificationTx(ctx, in.Name, status, func(tx pgx.Tx, store *db.Store, m db.Mirror) (db.Verification, error) {
		v, err := verificationOf(ctx, store, m, in.ID)
		if err != nil {
			return v, err
		}
		return fn(tx, store, m, v)
	})
}

// verificationOf loads verification id of mirror m, or answers 404.
func verificationOf(ctx context.Context, store *db.Store, m db.Mirror, id int64) (db.Verification, error) {
	v, err := store.VerificationGet(ctx, m.ID, id)
	if errors.Is(err, db.ErrNotFound) {
		return v, errorf(http.StatusNotFound, "Mirror %q has no verification %d: see GET /v1/mirrors/%s/verifications", m.Name, id, m.Name)
	}
	return v, err
}

// requireRunning answers 409 unless mirror m runs; what names the request
// ("verify", "repair").
func requireRunning(m db.Mirror, what string) error {
	if m.Status != db.StatusRunning || m.DesiredState != db.DesiredRunning {
		return errorf(http.StatusConflict, "Cannot %s mirror %q: its status is %s; a %s needs a running mirror (resume or retry it first)",
			what, m.Name, m.Status, map[string]string{"verify": "verification", "repair": "repair"}[what])
	}
	return nil
}

// startVerification creates a verification of m (of tables, all when
// empty; repairing verification repairOf first when not 0) and enqueues its
// job in tx, or answers 409 while another one runs.
func (h *handlers) startVerification(ctx context.Context, tx pgx.Tx, store *db.Store, m db.Mirror, tables []string, repairOf int64) (db.Verification, error) {
	if err := store.VerificationsFailStale(ctx, m.ID); err != nil {
		return db.Verification{}, err
	}
	if n, err := store.VerificationsRunning(ctx, m.ID); err != nil {
		return db.Verification{}, err
	} else if n > 0 {
		return db.Verification{}, errorf(http.StatusConflict, "A verification of mirror %q is already running: wait for it (GET /v1/mirrors/%s/verifications) or cancel it", m.Name, m.Name)
	}
	v, err := store.VerificationCreate(ctx, m.ID, currentUser(ctx).Username, tables, repairOf)
	if err != nil {
		return v, err
	}
	details := map[string]any{"verification_id": v.ID, "tables": tables}
	if repairOf != 0 {
		details["repair_of"] = repairOf
	}
	setAuditDetails(ctx, details)
	if _, err := h.river.InsertTx(ctx, tx, jobs.VerifyArgs{VerificationID: v.ID}, nil); err != nil {
		return v, fmt.Errorf("enqueue the verification: %w", err)
	}
	return v, nil
}

func (h *handlers) verify(ctx context.Context, in *verifyInput) (*verificationOutput, error) {
	var tables []string
	if in.Body != nil {
		tables = in.Body.Tables
	}
	for _, t := range tables {
		if !strings.Contains(t, ".") {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table %q is not schema.table (for example public.orders)", t)
		}
	}
	return h.verificationTx(ctx, in.Name, http.StatusAccepted, func(tx pgx.Tx, store *db.Store, m db.Mirror) (db.Verification, error) {
		if err := requireRunning(m, "verify"); err != nil {
			return db.Verification{}, err
		}
		mts, err := store.MirrorTables(ctx, m.ID)
		if err != nil {
			return db.Verification{}, err
		}
		known := map[string]bool{}
		for _, t := range mts {
			known[t.Source().String()] = true
		}
		for _, t := range tables {
			if !known[t] {
				return db.Verification{}, errorf(http.StatusBadRequest, "Invalid request: mirror %q has no source table %s: see GET /v1/mirrors/%s/tables", m.Name, t, m.Name)
			}
		}
		return h.startVerification(ctx, tx, store, m, tables, 0)
	})
}

// verificationsMirror loads the mirror name for reading its verifications,
// first marking failed those whose replica stopped.
func (h *handlers) verificationsMirror(ctx context.Context, name, what string) (db.Mirror, error) {
	m, err := h.mirror(ctx, name)
	if err != nil {
		return m, err
	}
	if err := h.store.VerificationsFailStale(ctx, m.ID); err != nil {
		return m, h.internal(ctx, what, err)
	}
	return m, nil
}

func (h *handlers) listVerifications(ctx context.Context, in *verificationsListInput) (*verificationsOutput, error) {
	m, err := h.verificationsMirror(ctx, in.Name, "list verifications")
	if err != nil {
		return nil, err
	}
	vs, err := h.store.VerificationList(ctx, m.ID, in.Limit)
	if err != nil {
		return nil, h.internal(ctx, "list verifications", err)
	}
	out := &verificationsOutput{Body: make([]verification, len(vs))}
	for i, v := range vs {
		out.Body[i] = toVerification(m, v)
	}
	return out, nil
}

func (h *handlers) getVerification(ctx context.Context, in *verificationPath) (*verificationOutput, error) {
	m, err := h.verificationsMirror(ctx, in.Name, "load the verification")
	if err != nil {
		return nil, err
	}
	v, err := verificationOf(ctx, h.store, m, in.ID)
	if ae := (*apiError)(nil); errors.As(err, &ae) {
		return nil, err
	}
	if err != nil {
		return nil, h.internal(ctx, "load the verification", err)
	}
	return &verificationOutput{Status: http.StatusOK, Body: toVerification(m, v)}, nil
}

func (h *handlers) cancelVerification(ctx context.Context, in *verificationPath) (*verificationOutput, error) {
	return h.verificationTxOf(ctx, in, http.StatusOK, func(tx pgx.Tx, store *db.Store, m db.Mirror, v db.Verification) (db.Verification, error) {
		setAuditDetails(ctx, map[string]any{"verification_id": v.ID})
		ok, err := store.VerificationCancel(ctx, m.ID, v.ID)
		if err != nil {
			return v, err
		}
		if !ok {
			return v, errorf(http.StatusConflict, "Verification %d of mirror %q has already ended (%s)", v.ID, m.Name, v.State)
		}
		if err := store.LogInsert(ctx, m.ID, db.LevelInfo, "Verification cancel requested", actor(ctx, map[string]string{"verification_id": fmt.Sprint(v.ID)})); err != nil {
			return v, err
		}
		return store.VerificationGet(ctx, m.ID, v.ID)
	})
}

func (h *handlers) repairVerification(ctx context.Context, in *verificationPath) (*verificationOutput, error) {
	return h.verificationTxOf(ctx, in, http.StatusAccepted, func(tx pgx.Tx, store *db.Store, m db.Mirror, old db.Verification) (db.Verification, error) {
		setAuditDetails(ctx, map[string]any{"repair_of": old.ID})
		if old.State != db.VerifyDone || old.RowsDiffering == nil || *old.RowsDiffering == 0 {
			return old, errorf(http.StatusConflict, "Verification %d of mirror %q has nothing to repair (state %s): only a done verification that found differences can be repaired", old.ID, m.Name, old.State)
		}
		if err := requireRunning(m, "repair"); err != nil {
			return old, err
		}
		var results []verify.TableResult
		if err := json.Unmarshal(old.Result, &results); err != nil {
			return old, fmt.Errorf("read verification result: %w", err)
		}
		var tables, resync []string
		for _, r := range results {
			switch {
			case r.Skipped != "" || r.Equal():
			case r.RepairRanges == nil || len(r.RepairRanges.Ranges) == 0 || r.RepairRanges.Incomplete:
				resync = append(resync, r.Table)
			default:
				tables = append(tables, r.Table)
			}
		}
		if len(resync) > 0 {
			return old, errorf(http.StatusConflict, "Cannot repair %s of mirror %q by key ranges (no primary key, or too many differing ranges): resync them with POST /v1/mirrors/%s/resync/{table}", strings.Join(resync, ", "), m.Name, m.Name)
		}
		return h.startVerification(ctx, tx, store, m, tables, old.ID)
	})
}

// mirrorVerification is the verification part of GET /v1/mirrors/{name}.
type mirrorVerification struct {
	VerifyIntervalSeconds int                 `json:"verify_interval_seconds" doc:"How often the mirror is verified on its own; 0: off."`
	Last                  *verificationLatest `json:"last" doc:"The latest verification that completed (state done); null before the first."`
}

type verificationLatest struct {
	ID            int64      `json:"id"`
	LSN           string     `json:"lsn"`
	FinishedAt    *time.Time `json:"finished_at"`
	RowsDiffering int64      `json:"rows_differing"`
}

func (h *handlers) mirrorVerification(ctx context.Context, m db.Mirror) (mirrorVerification, error) {
	var out mirrorVerification
	var err error
	if out.VerifyIntervalSeconds, err = h.store.VerifyInterval(ctx, m.ID); err != nil {
		return out, h.internal(ctx, "load the mirror's verification interval", err)
	}
	v, ok, err := h.store.VerificationLatest(ctx, m.ID)
	if err != nil {
		return out, h.internal(ctx, "load the mirror's latest verification", err)
	}
	if ok {
		out.Last = &verificationLatest{ID: v.ID, LSN: v.LSN, FinishedAt: v.FinishedAt}
		if v.RowsDiffering != nil {
			out.Last.RowsDiffering = *v.RowsDiffering
		}
	}
	return out, nil
}

type verifyIntervalInput struct {
	Name string `path:"name" doc:"Mirror name."`
	Body struct {
		VerifyIntervalSeconds int `json:"verify_interval_seconds" minimum:"0" maximum:"2592000" doc:"Verify the mirror every this many seconds (at least 60); 0 turns it off."`
	}
}

type verifyIntervalOutput struct {
	Body struct {
		Message               string `json:"message"`
		VerifyIntervalSeconds int    `json:"verify_interval_seconds"`
	}
}

func (h *handlers) registerVerifyInterval(api huma.API) {
	register(api, adminOnly, huma.Operation{
		OperationID: "set-verify-interval", Method: http.MethodPut, Path: "/v1/mirrors/{name}/verify-interval", Tags: []string{"Verification"},
		Summary: "Verify a mirror on a schedule",
		Description: "verify_interval_seconds (60 to 2592000, or 0 for off, the default) starts a verification of the mirror whenever that long " +
			"has passed since its last one started, while it is running. The latest result is in GET /v1/mirrors/{name} (verification) and in /metrics.",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.setVerifyInterval)
}

func (h *handlers) setVerifyInterval(ctx context.Context, in *verifyIntervalInput) (*verifyIntervalOutput, error) {
	n := in.Body.VerifyIntervalSeconds
	if n != 0 && n < 60 {
		return nil, errorf(http.StatusBadRequest, "Invalid request: verify_interval_seconds must be 0 (off) or at least 60, got %d", n)
	}
	setAuditDetails(ctx, map[string]any{"verify_interval_seconds": n})
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, m db.Mirror) error {
		return h.store.With(tx).VerifyIntervalSet(ctx, m.ID, n)
	})
	if err != nil {
		return nil, err
	}
	out := &verifyIntervalOutput{}
	out.Body.VerifyIntervalSeconds = n
	out.Body.Message = fmt.Sprintf("Mirror %q is verified every %d s while it runs", in.Name, n)
	if n == 0 {
		out.Body.Message = fmt.Sprintf("Mirror %q is no longer verified on a schedule", in.Name)
	}
	return out, nil
}
