package db_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

func values[T ~string](list []T) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = string(v)
	}
	sort.Strings(out)
	return out
}

// Every closed list of values in the catalog (a CHECK constraint of the
// form column IN (...)) is a Go vocabulary with exactly those values, and
// every vocabulary kept in a catalog column is checked there.
func TestVocabularyMatchesCatalog(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := context.Background()
	want := map[string][]string{
		"mirrors.status":                    values(db.MirrorStatuses),
		"mirrors.desired_state":             values(db.DesiredStates),
		"mirrors.resume_status":             {"initializing", "running", "snapshotting"},
		"mirrors.pending_action":            values(db.PendingActions),
		"mirrors.existing_destination_rows": values(db.ExistingRowsValues),
		"mirrors.schema_changes":            values(db.SchemaChangesModes),
		"mirror_tables.status":              values(db.TableStatuses),
		"mirror_tables.lost_changes_reason": values(db.LostReasons),
		"mirror_logs.level":                 values(db.LogLevels),
		"users.role":                        values(db.UserRoles),
		"peers.ssl_mode":                    values(db.SSLModes),
		"verifications.state":               values(db.VerificationStates),
		"verifications.hold_state":          values(db.HoldStates),
		"audit_log.target_type":             values(db.AuditTargetTypes),
		"audit_log.result":                  values(db.AuditResults),
		"login_failures.kind":               values(db.LoginSubjectKinds),
	}
	// resume_status is the status a failed mirror returns to: a subset.
	for _, s := range want["mirrors.resume_status"] {
		require.Contains(t, values(db.MirrorStatuses), s)
	}

	rows, err := store.Pool().Query(ctx, `SELECT c.relname, pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE k.contype = 'c' AND n.nspname = current_schema() AND c.relname NOT LIKE 'river%'`)
	require.NoError(t, err)
	defs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var d [2]string
		return d, r.Scan(&d[0], &d[1])
	})
	require.NoError(t, err)
	// PostgreSQL shows col IN ('a', 'b') as (col = ANY (ARRAY['a'::text, 'b'::text])).
	inList := regexp.MustCompile(`\(?(\w+) = ANY \(\(?ARRAY\[([^\]]*)\]`)
	literal := regexp.MustCompile(`'((?:[^']|'')*)'::text`)
	got := map[string][]string{}
	for _, d := range defs {
		for _, m := range inList.FindAllStringSubmatch(d[1], -1) {
			var vals []string
			for _, l := range literal.FindAllStringSubmatch(m[2], -1) {
				vals = append(vals, strings.ReplaceAll(l[1], "''", "'"))
			}
			sort.Strings(vals)
			got[d[0]+"."+m[1]] = vals
		}
	}
	require.Equal(t, want, got, "Go vocabularies (left) and the catalog's CHECK constraints (right)")
}

// The catalog's trigger allows exactly the mirror status transitions
// MirrorStatus.CanBecome allows: every pair of statuses is tried.
func TestStatusTransitionsMatchCatalog(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	ctx := context.Background()
	peer, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: "p", Host: "h", Port: 5432, User: "u", Password: "pw", Database: "d", SSLMode: db.SSLDisable})
	require.NoError(t, err)
	var problems []string
	for _, from := range db.MirrorStatuses {
		for _, to := range db.MirrorStatuses {
			tx, err := store.Pool().Begin(ctx)
			require.NoError(t, err)
			var id int64
			// Insert in status from directly (the trigger watches updates).
			err = tx.QueryRow(ctx, `INSERT INTO mirrors (name, source_peer_id, destination_peer_id, publication_name, replication_slot_name, status, error_message)
				VALUES ($1, $2, $2, 'pub', 'slot', $3, CASE WHEN $3 = 'error' THEN 'failed' END) RETURNING id`,
				fmt.Sprintf("t_%s_%s", from, to), peer.ID, string(from)).Scan(&id)
			require.NoError(t, err)
			_, err = tx.Exec(ctx, `UPDATE mirrors SET status = $2, error_message = CASE WHEN $2 = 'error' THEN 'failed' END WHERE id = $1`, id, string(to))
			allowed := err == nil
			if err != nil && !strings.Contains(err.Error(), "illegal mirror status transition") {
				t.Fatalf("%s -> %s: %v", from, to, err)
			}
			require.NoError(t, tx.Rollback(ctx))
			if allowed != from.CanBecome(to) {
				problems = append(problems, fmt.Sprintf("%s -> %s: catalog allows %v, Go %v", from, to, allowed, from.CanBecome(to)))
			}
		}
	}
	require.Empty(t, problems)
	require.True(t, slices.Contains(db.MirrorStatuses, db.StatusCompleted))
}
