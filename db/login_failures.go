package db

import (
	"context"
	"fmt"
	"time"
)

// LoginSubjectKind is what a count of failed logins is kept by
// (login_failures.kind).
type LoginSubjectKind string

// Kinds of login failure subjects.
const (
	LoginSubjectUser    LoginSubjectKind = "user"
	LoginSubjectAddress LoginSubjectKind = "address"
)

// LoginSubject is what failed logins are counted by: a user name or a client
// address.
type LoginSubject struct {
	Kind  LoginSubjectKind
	Value string
}

// LoginFailures returns, for each subject, the times of its failed logins
// within the last window, newest first, and the catalog's clock (so every
// replica measures the window by one clock).
func (s *Store) LoginFailures(ctx context.Context, window time.Duration, subjects ...LoginSubject) (map[LoginSubject][]time.Time, time.Time, error) {
	kinds, values := splitSubjects(subjects)
	var now time.Time
	if err := s.q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, time.Time{}, fmt.Errorf("count failed logins: %w", err)
	}
	rows, err := s.q.Query(ctx, `SELECT f.kind, f.subject, f.failed_at
		FROM login_failures f JOIN unnest($1::text[], $2::text[]) AS s(kind, subject) USING (kind, subject)
		WHERE f.failed_at > $3::timestamptz - $4 * interval '1 second'
		ORDER BY f.failed_at DESC`, kinds, values, now, window.Seconds())
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("count failed logins: %w", err)
	}
	defer rows.Close()
	out := map[LoginSubject][]time.Time{}
	for rows.Next() {
		var sub LoginSubject
		var at time.Time
		if err := rows.Scan(&sub.Kind, &sub.Value, &at); err != nil {
			return nil, time.Time{}, fmt.Errorf("count failed logins: %w", err)
		}
		out[sub] = append(out[sub], at)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("count failed logins: %w", err)
	}
	return out, now, nil
}

// LoginFailureRecord records one failed login for each subject, and deletes
// failures older than window (of any subject) so the table stays small.
func (s *Store) LoginFailureRecord(ctx context.Context, window time.Duration, subjects ...LoginSubject) error {
	kinds, values := splitSubjects(subjects)
	if _, err := s.q.Exec(ctx, `WITH expired AS (
			DELETE FROM login_failures WHERE failed_at < now() - $3 * interval '1 second'
		)
		INSERT INTO login_failures (kind, subject) SELECT * FROM unnest($1::text[], $2::text[])`,
		kinds, values, window.Seconds()); err != nil {
		return fmt.Errorf("record failed login: %w", translate(err))
	}
	return nil
}

// LoginFailuresClear forgets the failed logins of one subject (after a
// successful login of that user).
func (s *Store) LoginFailuresClear(ctx context.Context, sub LoginSubject) error {
	if _, err := s.q.Exec(ctx, `DELETE FROM login_failures WHERE kind = $1 AND subject = $2`, sub.Kind, sub.Value); err != nil {
		return fmt.Errorf("clear failed logins of %s %q: %w", sub.Kind, sub.Value, err)
	}
	return nil
}

// splitSubjects returns the kinds and values of subjects as two arrays, for
// unnest.
func splitSubjects(subjects []LoginSubject) (kinds, values []string) {
	kinds = make([]string, len(subjects))
	values = make([]string, len(subjects))
	for i, sub := range subjects {
		kinds[i], values[i] = string(sub.Kind), sub.Value
	}
	return kinds, values
}
