package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type auditEntryRec struct {
	ID         int64
	CreatedAt  time.Time `json:"created_at"`
	UserID     int64     `json:"user_id"`
	Username   string
	Action     string
	TargetType string `json:"target_type"`
	TargetName string `json:"target_name"`
	Result     string
	Status     int
	Details    map[string]any
}

type auditPage struct {
	Entries []auditEntryRec
	Total   int64
	Offset  int
	Limit   int
}

func (b *bundle) audit(query url.Values) auditPage {
	b.t.Helper()
	var page auditPage
	path := "/v1/audit"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	raw := b.mustDo(http.MethodGet, path, b.adminToken, nil, http.StatusOK)
	require.NoError(b.t, json.Unmarshal(raw, &page), "%s", raw)
	require.NotContains(b.t, string(raw), `"entries":null`)
	return page
}

// lastAudit returns the newest audit entry of an action.
func (b *bundle) lastAudit(action string) auditEntryRec {
	b.t.Helper()
	page := b.audit(q("action", action, "limit", "1"))
	require.NotEmpty(b.t, page.Entries, "no audit entry for %s", action)
	return page.Entries[0]
}

func (b *bundle) userID(name string) int64 {
	b.t.Helper()
	var id int64
	require.NoError(b.t, b.pool.QueryRow(b.t.Context(), `SELECT id FROM users WHERE username = $1`, name).Scan(&id))
	return id
}

func TestAuditRecordsEveryChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adminID, viewerID := b.userID("admin"), b.userID("viewer")
	requireEntry := func(action, targetType, target string, status int) auditEntryRec {
		t.Helper()
		e := b.lastAudit(action)
		require.Equal(t, "admin", e.Username, action)
		require.Equal(t, adminID, e.UserID, action)
		require.Equal(t, targetType, e.TargetType, action)
		require.Equal(t, target, e.TargetName, action)
		require.Equal(t, "success", e.Result, action)
		require.Equal(t, status, e.Status, action)
		require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute, action)
		return e
	}

	// Users (setup created "viewer").
	e := requireEntry("create-user", "user", "viewer", http.StatusCreated)
	require.Equal(t, "viewer", e.Details["role"])
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "gone", "password": "pw", "role": "admin"}, http.StatusCreated)
	b.mustDo(http.MethodDelete, "/v1/users/gone", b.adminToken, nil, http.StatusOK)
	requireEntry("delete-user", "user", "gone", http.StatusOK)
	var changed struct{ Token string }
	b.mustDecode(http.MethodPost, "/v1/auth/change-password", b.adminToken,
		map[string]any{"current_password": "admin-password", "new_password": "new-admin-password"}, http.StatusOK, &changed)
	b.adminToken = changed.Token
	e = requireEntry("change-password", "user", "admin", http.StatusOK)
	require.Equal(t, []any{"password"}, e.Details["fields"])
	require.Equal(t, false, e.Details["tokens_revoked"], "by default a password change revokes no token")

	// Peers: the update names the changed fields, never a value of the password.
	b.mirrorPeers()
	requireEntry("create-peer", "peer", "dst", http.StatusCreated)
	b.mustDo(http.MethodPut, "/v1/peers/src", b.adminToken, map[string]any{"password": peerPassword, "host": "127.0.0.1"}, http.StatusOK)
	e = requireEntry("update-peer", "peer", "src", http.StatusOK)
	require.Equal(t, []any{"host", "password"}, e.Details["fields"])
	b.destPeer("spare")
	b.mustDo(http.MethodDelete, "/v1/peers/spare", b.adminToken, nil, http.StatusOK)
	requireEntry("delete-peer", "peer", "spare", http.StatusOK)

	// Mirrors and every control operation.
	b.createMirror("m")
	e = requireEntry("create-mirror", "mirror", "m", http.StatusCreated)
	require.Equal(t, "src", e.Details["source_peer"])
	b.setStatus("m", "running")
	b.mustDo(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusOK)
	requireEntry("pause-mirror", "mirror", "m", http.StatusOK)
	b.mustDo(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, map[string]any{"table_mappings": []any{mapping("orders", "orders"), mapping("items", "items")}}, http.StatusOK)
	e = requireEntry("put-mirror-tables", "mirror", "m", http.StatusOK)
	require.EqualValues(t, 2, e.Details["tables"])
	b.mustDo(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusOK)
	requireEntry("resume-mirror", "mirror", "m", http.StatusOK)
	b.mustDo(http.MethodPost, "/v1/mirrors/m/resync/public.items", b.adminToken, nil, http.StatusOK)
	e = requireEntry("resync-table", "mirror", "m", http.StatusOK)
	require.Equal(t, "public.items", e.Details["table"])
	b.exec(`UPDATE mirror_tables SET resync_requested_at = NULL`)
	b.mustDo(http.MethodPost, "/v1/mirrors/m/sync-schema", b.adminToken, nil, http.StatusOK)
	requireEntry("sync-schema", "mirror", "m", http.StatusOK)
	b.exec(`UPDATE mirrors SET pending_action = NULL WHERE name = 'm'`)
	b.mustDo(http.MethodPost, "/v1/mirrors/m/resync", b.adminToken, nil, http.StatusOK)
	requireEntry("resync-mirror", "mirror", "m", http.StatusOK)
	b.exec(`UPDATE mirrors SET pending_action = NULL WHERE name = 'm'`)
	b.setStatus("m", "error")
	b.mustDo(http.MethodPost, "/v1/mirrors/m/retry", b.adminToken, nil, http.StatusOK)
	requireEntry("retry-mirror", "mirror", "m", http.StatusOK)
	b.mustDo(http.MethodDelete, "/v1/mirrors/m", b.adminToken, nil, http.StatusOK)
	requireEntry("delete-mirror", "mirror", "m", http.StatusOK)
	// Entries written in the change's own transaction are not written again.
	for _, action := range []string{"create-mirror", "pause-mirror", "resume-mirror", "put-mirror-tables", "retry-mirror", "delete-mirror",
		"delete-user", "change-password"} {
		require.EqualValues(t, 1, b.audit(q("action", action)).Total, action)
	}
	require.EqualValues(t, 2, b.audit(q("action", "create-user")).Total, "viewer and gone")

	// Refused changes are recorded too, with the status: a viewer's attempt
	// (403), an admin's conflict (409) and an invalid create (400) whose
	// target is unknown.
	b.requireError(http.MethodDelete, "/v1/peers/src", b.viewerToken, nil, http.StatusForbidden)
	e = b.lastAudit("delete-peer")
	require.Equal(t, "viewer", e.Username)
	require.Equal(t, viewerID, e.UserID)
	require.Equal(t, "src", e.TargetName)
	require.Equal(t, "failure", e.Result)
	require.Equal(t, http.StatusForbidden, e.Status)
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, validPeer(t, "src"), http.StatusConflict)
	e = b.lastAudit("create-peer")
	require.Equal(t, "src", e.TargetName)
	require.Equal(t, "failure", e.Result)
	require.Equal(t, http.StatusConflict, e.Status)
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{"name": 5}, http.StatusBadRequest)
	e = b.lastAudit("create-mirror")
	require.Equal(t, "failure", e.Result)
	require.Equal(t, http.StatusBadRequest, e.Status)
	require.Empty(t, e.TargetName)

	// Reads are not recorded.
	before := b.audit(nil).Total
	b.mustDo(http.MethodGet, "/v1/peers", b.adminToken, nil, http.StatusOK)
	b.mustDo(http.MethodPost, "/v1/peers/src/test", b.adminToken, nil, http.StatusOK)
	require.Equal(t, before, b.audit(nil).Total)

	// No secret ever reaches the audit log.
	var leaks int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE audit_log::text LIKE '%' || $1 || '%'
		OR audit_log::text LIKE '%admin-password%' OR audit_log::text LIKE '%$2a$%'`, peerPassword).Scan(&leaks))
	require.Zero(t, leaks)
}

func TestAuditReadAccessAndPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"u1", "u2", "u3", "u4"} {
		b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": name, "password": "pw", "role": "viewer"}, http.StatusCreated)
	}
	b.requireError(http.MethodGet, "/v1/audit", b.viewerToken, nil, http.StatusForbidden, "admin")
	b.requireError(http.MethodGet, "/v1/audit", "", nil, http.StatusUnauthorized)

	all := b.audit(nil)
	require.EqualValues(t, 5, all.Total, "viewer, u1..u4")
	require.Equal(t, 50, all.Limit)
	require.Equal(t, 0, all.Offset)
	require.Len(t, all.Entries, 5)
	for i := 1; i < len(all.Entries); i++ {
		require.Greater(t, all.Entries[i-1].ID, all.Entries[i].ID, "newest first")
	}
	require.Equal(t, "u4", all.Entries[0].TargetName)

	var paged []auditEntryRec
	for offset := 0; offset < int(all.Total); offset += 2 {
		page := b.audit(q("limit", "2", "offset", strconv.Itoa(offset)))
		require.Equal(t, all.Total, page.Total)
		require.Equal(t, 2, page.Limit)
		require.Equal(t, offset, page.Offset)
		paged = append(paged, page.Entries...)
	}
	require.Equal(t, all.Entries, paged, "pages put together are the whole log")

	// Filters combine; total counts what matches.
	b.requireError(http.MethodDelete, "/v1/users/u1", b.viewerToken, nil, http.StatusForbidden)
	page := b.audit(q("result", "failure"))
	require.EqualValues(t, 1, page.Total)
	require.Equal(t, "viewer", page.Entries[0].Username)
	page = b.audit(q("target_type", "user", "target_name", "u2"))
	require.EqualValues(t, 1, page.Total)
	require.Equal(t, "create-user", page.Entries[0].Action)
	page = b.audit(q("username", "admin", "action", "delete-user"))
	require.EqualValues(t, 0, page.Total)
	require.Empty(t, page.Entries)

	b.requireError(http.MethodGet, "/v1/audit?limit=501", b.adminToken, nil, http.StatusBadRequest, "limit")
	b.requireError(http.MethodGet, "/v1/audit?result=maybe", b.adminToken, nil, http.StatusBadRequest, "result")
}

func TestControlLogNamesTheUser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("m")
	b.setStatus("m", "running")
	b.mustDo(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusOK)
	b.mustDo(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusOK)
	b.mustDo(http.MethodPost, "/v1/mirrors/m/resync/public.orders", b.adminToken, nil, http.StatusOK)
	page := b.logs("m", nil)
	require.Len(t, page.Logs, 3)
	for i, want := range []string{"Table resync started", "Mirror resumed", "Mirror paused"} {
		require.Equal(t, want, page.Logs[i].Message, "the spec's message text is unchanged")
		require.Equal(t, "admin", page.Logs[i].Details["user"], want)
	}
	require.Equal(t, "public.orders", page.Logs[0].Details["table"])
	// The user can be searched for.
	require.EqualValues(t, 3, b.logs("m", q("search", "admin")).Total)
}

// A request whose change is written (and audited in the same transaction)
// before its answer is known is recorded with the status the client
// received: a cut-over that the worker refuses answers 409 and is logged
// as a failure with 409, one still running when the wait ends is logged
// 202. No worker runs here: the test plays its part in the catalog.
func TestAuditRecordsStatusSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("c-fail")
	b.setStatus("c-fail", "running")
	b.exec(`UPDATE mirror_tables SET status = 'running'`)

	// The worker's refusal, written once the request is recorded.
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			tag, err := b.pool.Exec(t.Context(), `UPDATE mirrors SET cutover = cutover ||
				jsonb_build_object('state', 'failed', 'finished_at', now(), 'error', 'Cut-over refused: the source lags')
				WHERE name = 'c-fail' AND cutover->>'state' = 'requested'`)
			if err != nil || tag.RowsAffected() == 1 {
				done <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- nil
	}()
	b.requireError(http.MethodPost, "/v1/mirrors/c-fail/cutover", b.adminToken, map[string]any{"wait_seconds": 20}, http.StatusConflict,
		"Cut-over refused: the source lags")
	require.NoError(t, <-done)
	e := b.lastAudit("cutover-mirror")
	require.Equal(t, http.StatusConflict, e.Status, "the audit entry of a refused cut-over")
	require.Equal(t, "failure", e.Result)
	require.Equal(t, "c-fail", e.TargetName)
	require.Equal(t, int64(1), b.audit(q("action", "cutover-mirror")).Total, "one entry per request")

	b.createMirror("c-wait")
	b.setStatus("c-wait", "running")
	b.exec(`UPDATE mirror_tables SET status = 'running'`)
	b.mustDo(http.MethodPost, "/v1/mirrors/c-wait/cutover", b.adminToken, map[string]any{"wait_seconds": 0}, http.StatusAccepted)
	e = b.lastAudit("cutover-mirror")
	require.Equal(t, "c-wait", e.TargetName)
	require.Equal(t, http.StatusAccepted, e.Status)
	require.Equal(t, "success", e.Result)
}
