package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
)

// auditedOperations maps every operation that changes something to the type
// of its target. Each is recorded in the audit log under its operation id,
// whether it succeeds or is refused. register panics on a write operation
// that is in neither this map nor notAudited, so a new endpoint cannot be
// forgotten.
var auditedOperations = map[string]db.AuditTargetType{
	"create-user":         db.AuditTargetUser,
	"delete-user":         db.AuditTargetUser,
	"change-password":     db.AuditTargetUser,
	"create-peer":         db.AuditTargetPeer,
	"update-peer":         db.AuditTargetPeer,
	"delete-peer":         db.AuditTargetPeer,
	"create-mirror":       db.AuditTargetMirror,
	"delete-mirror":       db.AuditTargetMirror,
	"update-mirror":       db.AuditTargetMirror,
	"pause-mirror":        db.AuditTargetMirror,
	"resume-mirror":       db.AuditTargetMirror,
	"resync-mirror":       db.AuditTargetMirror,
	"resync-table":        db.AuditTargetMirror,
	"retry-mirror":        db.AuditTargetMirror,
	"sync-schema":         db.AuditTargetMirror,
	"put-mirror-tables":   db.AuditTargetMirror,
	"cutover-mirror":      db.AuditTargetMirror,
	"verify-mirror":       db.AuditTargetMirror,
	"cancel-verification": db.AuditTargetMirror,
	"repair-verification": db.AuditTargetMirror,
	"set-verify-interval": db.AuditTargetMirror,
}

// notAudited lists the operations with a write method that change nothing.
var notAudited = map[string]bool{
	"login":     true, // failed logins are counted in login_failures
	"test-peer": true, // only connects to the peer
}

// checkAudited panics when a write operation is neither audited nor
// declared as changing nothing.
func checkAudited(op huma.Operation) {
	if op.Method == http.MethodGet || op.Method == http.MethodHead || notAudited[op.OperationID] {
		return
	}
	if _, ok := auditedOperations[op.OperationID]; !ok {
		panic(fmt.Sprintf("httpapi: operation %s (%s %s) changes state but is not in auditedOperations", op.OperationID, op.Method, op.Path))
	}
}

// auditRecord is the audit entry of the request in progress. Handlers fill
// in the target and details; the auth middleware writes the entry when the
// handler has not written it inside its own transaction.
type auditRecord struct {
	entry   db.AuditEntry
	details map[string]any
	// successStatus is the operation's status on success.
	successStatus int
	// written: the entry was written in the change's transaction (with
	// id), with successStatus; it is corrected if the client receives
	// another status.
	written bool
	id      int64
}

type auditKey struct{}

func auditFrom(ctx context.Context) *auditRecord {
	rec, _ := ctx.Value(auditKey{}).(*auditRecord)
	return rec
}

// setAuditTarget names the target of the request's audit entry (for
// operations whose target is not a path parameter, such as creates).
func setAuditTarget(ctx context.Context, name string) {
	if rec := auditFrom(ctx); rec != nil {
		rec.entry.TargetName = name
	}
}

// setAuditDetails adds details to the request's audit entry. Never pass a
// secret value: name the changed field instead.
func setAuditDetails(ctx context.Context, details map[string]any) {
	rec := auditFrom(ctx)
	if rec == nil {
		return
	}
	if rec.details == nil {
		rec.details = map[string]any{}
	}
	for k, v := range details {
		rec.details[k] = v
	}
}

// startAudit prepares the audit entry of an audited operation by user u and
// returns the context handlers see, and the function that writes the entry
// once the response status is known (unless the handler wrote it already).
func (h *handlers) startAudit(ctx huma.Context, u db.User) (huma.Context, func()) {
	op := ctx.Operation()
	targetType, ok := auditedOperations[op.OperationID]
	if !ok {
		return ctx, func() {}
	}
	target := ctx.Param("name")
	if targetType == db.AuditTargetUser {
		target = ctx.Param("username")
	}
	rec := &auditRecord{entry: db.AuditEntry{
		UserID: u.ID, Username: u.Username, Action: op.OperationID, TargetType: targetType, TargetName: target,
	}, successStatus: cmp.Or(op.DefaultStatus, http.StatusOK)}
	ctx = huma.WithValue(ctx, auditKey{}, rec)
	return ctx, func() {
		status := ctx.Status()
		if status == 0 {
			status = http.StatusOK
		}
		result := db.AuditSuccess
		if status >= 400 {
			result = db.AuditFailure
		}
		// The client may have gone: the entry is written all the same.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx.Context()), 10*time.Second)
		defer cancel()
		if rec.written {
			// Written with the change, before the response was known: the
			// handler may still have answered otherwise (a cut-over
			// requested and then refused, an accepted one still running).
			if status != rec.entry.Status {
				if err := h.store.AuditSetOutcome(wctx, rec.id, result, status); err != nil {
					h.logger.ErrorContext(wctx, "correct audit entry", slog.String("action", rec.entry.Action),
						slog.Int64("id", rec.id), slog.Int("status", status), slog.Any("error", err))
				}
			}
			return
		}
		rec.entry.Status, rec.entry.Result = status, result
		if _, err := h.store.AuditInsert(wctx, rec.complete()); err != nil {
			h.logger.ErrorContext(wctx, "write audit entry", slog.String("action", rec.entry.Action),
				slog.String("user", rec.entry.Username), slog.String("target_type", string(rec.entry.TargetType)),
				slog.String("target", rec.entry.TargetName), slog.Int("status", status), slog.Any("error", err))
		}
	}
}

// complete returns the entry with its details marshalled.
func (rec *auditRecord) complete() db.AuditEntry {
	e := rec.entry
	if len(rec.details) > 0 {
		if b, err := json.Marshal(rec.details); err == nil {
			e.Details = b
		}
	}
	return e
}

// auditedTx runs fn in a catalog transaction and, when fn succeeds, writes
// the request's audit entry (result success, the operation's success status)
// in the same transaction: the entry exists exactly when the change does.
// When the client then receives another status, the entry is corrected to
// it once the response is written.
func (h *handlers) auditedTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	rec := auditFrom(ctx)
	err := pgx.BeginFunc(ctx, h.store.Pool(), func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		rec.entry.Result, rec.entry.Status = db.AuditSuccess, rec.successStatus
		var err error
		rec.id, err = h.store.With(tx).AuditInsert(ctx, rec.complete())
		return err
	})
	if err == nil && rec != nil {
		rec.written = true
	}
	return err
}

// actor returns the details that name the requesting user in a mirror's
// control log entries, merged with extra.
func actor(ctx context.Context, extra map[string]string) map[string]string {
	out := map[string]string{"user": currentUser(ctx).Username}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

type auditInput struct {
	Limit      int                `query:"limit" minimum:"1" maximum:"500" default:"50" doc:"Number of entries returned."`
	Offset     int                `query:"offset" minimum:"0" default:"0" doc:"Number of entries skipped."`
	Username   string             `query:"username" maxLength:"128" doc:"Only entries of this acting user."`
	Action     string             `query:"action" maxLength:"64" doc:"Only entries of this action (an operation id such as delete-peer or pause-mirror)."`
	TargetType db.AuditTargetType `query:"target_type" doc:"Only entries about this kind of target."`
	TargetName string             `query:"target_name" maxLength:"128" doc:"Only entries about the target of this name."`
	Result     db.AuditResult     `query:"result" doc:"Only successful or only refused requests."`
}

type auditEntryBody struct {
	ID         int64              `json:"id"`
	CreatedAt  time.Time          `json:"created_at"`
	UserID     int64              `json:"user_id" doc:"Id of the acting user."`
	Username   string             `json:"username" doc:"Name of the acting user."`
	Action     string             `json:"action" doc:"The operation id, for example create-peer or pause-mirror."`
	TargetType db.AuditTargetType `json:"target_type"`
	TargetName string             `json:"target_name,omitempty" doc:"Absent when the request was refused before its target was known."`
	Result     db.AuditResult     `json:"result"`
	Status     int                `json:"status" doc:"HTTP status of the response."`
	Details    json.RawMessage    `json:"details" doc:"What changed: field names and other non-secret facts; never a password."`
}

type auditOutput struct {
	Body struct {
		Entries []auditEntryBody `json:"entries" doc:"Newest first."`
		Total   int64            `json:"total" doc:"Entries matching the filter."`
		Offset  int              `json:"offset"`
		Limit   int              `json:"limit"`
	}
}

func (h *handlers) registerAudit(api huma.API) {
	register(api, adminOnly, huma.Operation{
		OperationID: "audit-log", Method: http.MethodGet, Path: "/v1/audit", Tags: []string{"Audit"},
		Summary: "Audit log",
		Description: "Every change made through the API (users, peers, mirrors and mirror control), successful or refused, " +
			"with the acting user, time, action, target, result and HTTP status; newest first. Page by increasing offset until it reaches total. Filters combine.",
		Errors: []int{http.StatusBadRequest},
	}, h.audit)
}

func (h *handlers) audit(ctx context.Context, in *auditInput) (*auditOutput, error) {
	entries, total, err := h.store.AuditList(ctx, db.AuditQuery{Username: in.Username, Action: in.Action, TargetType: in.TargetType,
		TargetName: in.TargetName, Result: in.Result, Limit: in.Limit, Offset: in.Offset})
	if err != nil {
		return nil, h.internal(ctx, "read the audit log", err)
	}
	out := &auditOutput{}
	out.Body.Entries = make([]auditEntryBody, 0, len(entries))
	for _, e := range entries {
		out.Body.Entries = append(out.Body.Entries, auditEntryBody{ID: e.ID, CreatedAt: e.CreatedAt, UserID: e.UserID, Username: e.Username,
			Action: e.Action, TargetType: e.TargetType, TargetName: e.TargetName, Result: e.Result, Status: e.Status, Details: e.Details})
	}
	out.Body.Total, out.Body.Offset, out.Body.Limit = total, in.Offset, in.Limit
	return out, nil
}

// changedFields returns the names of the fields that are set, sorted.
func changedFields(set map[string]bool) []string {
	out := []string{}
	for name, ok := range set {
		if ok {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
