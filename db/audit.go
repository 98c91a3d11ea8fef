package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// AuditResult is how an audited request ended (audit_log.result).
type AuditResult string

// Results of audited requests.
const (
	AuditSuccess AuditResult = "success"
	AuditFailure AuditResult = "failure"
)

// AuditTargetType is the kind of object an audited request is about
// (audit_log.target_type).
type AuditTargetType string

// Target types of audit entries.
const (
	AuditTargetUser   AuditTargetType = "user"
	AuditTargetPeer   AuditTargetType = "peer"
	AuditTargetMirror AuditTargetType = "mirror"
)

// AuditEntry is one change made (or refused) through the API. Details never
// hold a secret value: they name changed fields, not their values.
type AuditEntry struct {
	ID         int64
	CreatedAt  time.Time
	UserID     int64
	Username   string
	Action     string
	TargetType AuditTargetType
	// TargetName is "" when the request was refused before its target was
	// known.
	TargetName string
	Result     AuditResult
	Status     int
	Details    json.RawMessage
}

// AuditInsert appends an entry to the audit log and returns its id. ID and
// CreatedAt are ignored; a nil Details gives {}.
func (s *Store) AuditInsert(ctx context.Context, e AuditEntry) (int64, error) {
	return auditInsert(ctx, s.q, e)
}

// AuditSetOutcome corrects the result and HTTP status of an audit entry
// written before the response was complete (inside the change's own
// transaction), when the client received another status.
func (s *Store) AuditSetOutcome(ctx context.Context, id int64, result AuditResult, status int) error {
	if _, err := s.q.Exec(ctx, `UPDATE audit_log SET result = $2, status = $3 WHERE id = $1`, id, result, status); err != nil {
		return fmt.Errorf("correct the status of audit entry %d: %w", id, translate(err))
	}
	return nil
}

func auditInsert(ctx context.Context, q Executor, e AuditEntry) (int64, error) {
	details := e.Details
	if len(details) == 0 {
		details = json.RawMessage(`{}`)
	}
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO audit_log (user_id, username, action, target_type, target_name, result, status, details)
		VALUES ($1, $2, $3, $4, NULLIF($5, ''), $6, $7, $8::jsonb) RETURNING id`,
		e.UserID, e.Username, e.Action, e.TargetType, e.TargetName, e.Result, e.Status, string(details)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert audit entry %s of %s %q: %w", e.Action, e.TargetType, e.TargetName, translate(err))
	}
	return id, nil
}

// AuditQuery filters the audit log. Zero values mean no filter; Limit must be
// set by the caller.
type AuditQuery struct {
	Username   string
	Action     string
	TargetType AuditTargetType
	TargetName string
	Result     AuditResult
	Limit      int
	Offset     int
}

// AuditList returns a page of audit entries newest first, and the number of
// entries matching the filter.
func (s *Store) AuditList(ctx context.Context, q AuditQuery) ([]AuditEntry, int64, error) {
	where := `TRUE`
	var args []any
	for _, f := range []struct{ column, value string }{
		{"username", q.Username}, {"action", q.Action}, {"target_type", string(q.TargetType)},
		{"target_name", q.TargetName}, {"result", string(q.Result)},
	} {
		if f.value != "" {
			args = append(args, f.value)
			where += fmt.Sprintf(` AND %s = $%d`, f.column, len(args))
		}
	}
	var total int64
	if err := s.q.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count audit entries: %w", err)
	}
	args = append(args, q.Limit, q.Offset)
	rows, err := s.q.Query(ctx, fmt.Sprintf(`SELECT id, created_at, user_id, username, action, target_type, coalesce(target_name, ''),
			result, status, details::text
		FROM audit_log WHERE %s ORDER BY id DESC LIMIT $%d OFFSET $%d`, where, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list audit entries: %w", err)
	}
	defer rows.Close()
	out := []AuditEntry{}
	for rows.Next() {
		var e AuditEntry
		var details string
		if err := rows.Scan(&e.ID, &e.CreatedAt, &e.UserID, &e.Username, &e.Action, &e.TargetType, &e.TargetName,
			&e.Result, &e.Status, &details); err != nil {
			return nil, 0, fmt.Errorf("list audit entries: %w", err)
		}
		e.Details = json.RawMessage(details)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list audit entries: %w", err)
	}
	return out, total, nil
}
