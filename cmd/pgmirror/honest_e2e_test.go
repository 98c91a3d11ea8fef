package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// replicaIdentity returns the replica identity of table (schema.table) in
// the database at dbURL: FULL, DEFAULT, NOTHING or "INDEX <name>".
func replicaIdentity(t *testing.T, dbURL, table string) string {
	t.Helper()
	var ident string
	queryOne(t, dbURL, &ident, `SELECT CASE c.relreplident WHEN 'f' THEN 'FULL' WHEN 'd' THEN 'DEFAULT' WHEN 'n' THEN 'NOTHING'
		ELSE 'INDEX ' || COALESCE((SELECT ic.relname::text FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		                           WHERE i.indrelid = c.oid AND i.indisreplident), '') END
		FROM pg_class c WHERE c.oid = $1::regclass`, table)
	return ident
}

// reverseVerification is the part of a verification these tests read.
type reverseVerification struct {
	ID                    int64     `json:"id"`
	State                 string    `json:"state"`
	ReverseMirrorProblems *[]string `json:"reverse_mirror_problems"`
}

// verifyReverse runs a verification of the mirror and returns its reverse
// mirror problems once it is done.
func (s *service) verifyReverse(t *testing.T, name string) []string {
	t.Helper()
	v := s.runVerify(t, name, nil)
	require.Equal(t, "done", v.State, "verification of %s: %+v", name, v)
	var rv reverseVerification
	s.mustDo("GET", fmt.Sprintf("/v1/mirrors/%s/verifications/%d", name, v.ID), nil, 200, &rv)
	require.NotNil(t, rv.ReverseMirrorProblems, "verification %d checked the reverse mirror's prerequisites", v.ID)
	// The shared test clusters' free slots and WAL senders depend on the
	// tests running beside this one.
	var out []string
	for _, p := range *rv.ReverseMirrorProblems {
		if !strings.Contains(p, "has no free replication slot") && !strings.Contains(p, "has no free WAL sender") {
			out = append(out, p)
		}
	}
	return out
}

// TestReplicaIdentityReverse: destination tables pgmirror creates carry
// the source's replica identity (FULL for keyless tables, USING INDEX over
// the UNIQUE constraint that stands for a keyless table's identity index,
// and, once the cut-over created it, the source's identity index of a table
// with a primary key). A verification names what would keep a cut-over from
// creating a reverse mirror (a destination table the user created without
// an identity; a destination without wal_level logical) long before the
// cut-over, and the reverse mirror then carries updates and deletes of the
// keyless table back.
func TestReplicaIdentityReverse(t *testing.T) {
	t.Parallel()
	catalog, src, dst, s := newEnv(t, `
		CREATE TABLE kl_full (a int, b text);
		ALTER TABLE kl_full REPLICA IDENTITY FULL;
		CREATE TABLE kl_idx (a int NOT NULL, b text);
		CREATE UNIQUE INDEX kl_idx_a ON kl_idx (a);
		ALTER TABLE kl_idx REPLICA IDENTITY USING INDEX kl_idx_a;
		CREATE TABLE pk_idx (id int PRIMARY KEY, code text NOT NULL);
		CREATE UNIQUE INDEX pk_idx_code ON pk_idx (code);
		ALTER TABLE pk_idx REPLICA IDENTITY USING INDEX pk_idx_code;
		CREATE TABLE mine (a int, b text);
		ALTER TABLE mine REPLICA IDENTITY FULL;
		INSERT INTO kl_full SELECT g, 'f' || g FROM generate_series(1, 50) g;
		INSERT INTO kl_idx SELECT g, 'i' || g FROM generate_series(1, 50) g;
		INSERT INTO pk_idx SELECT g, 'c' || g FROM generate_series(1, 50) g;
		INSERT INTO mine SELECT g, 'm' || g FROM generate_series(1, 5) g;`)
	_ = catalog
	// A destination table the user made: pgmirror leaves it as it is.
	exec1(t, dst, `CREATE TABLE mine (a int, b text)`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ri", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "kl_full", "public", "kl_full"), mapping("public", "kl_idx", "public", "kl_idx"),
			mapping("public", "pk_idx", "public", "pk_idx"), mapping("public", "mine", "public", "mine")},
	}, 201, nil)
	s.waitStatus("ri", "running", 90*time.Second)
	require.Equal(t, "FULL", replicaIdentity(t, dst, "public.kl_full"))
	require.Equal(t, "INDEX kl_idx_a_key", replicaIdentity(t, dst, "public.kl_idx"))
	require.Equal(t, "DEFAULT", replicaIdentity(t, dst, "public.pk_idx"), "the primary key until the cut-over adds the unique index")
	require.Equal(t, "DEFAULT", replicaIdentity(t, dst, "public.mine"), "a table the user created is left as it is")

	// The verification names the table a reverse mirror could not read.
	problems := s.verifyReverse(t, "ri")
	require.Len(t, problems, 1, "%q", problems)
	require.Contains(t, problems[0], "table public.mine has neither a primary key nor REPLICA IDENTITY FULL")
	require.Contains(t, problems[0], "on the destination")
	warn := s.waitLog("ri", "Verification: a reverse mirror could not be created", 10*time.Second, nil)
	require.Equal(t, "WARN", warn.Level)
	exec1(t, dst, `ALTER TABLE mine REPLICA IDENTITY FULL`)
	require.Empty(t, s.verifyReverse(t, "ri"), "nothing keeps a reverse mirror once the table has an identity")

	// A destination without wal_level logical: named by the verification,
	// weeks before the cut-over would refuse.
	replicaDst := pgtest.NewDatabase(t, pgtest.NewCluster(t, false))
	s.createPeer("plain_dst", replicaDst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ri_plain", "source_peer": "src", "destination_peer": "plain_dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "kl_full", "public", "kl_full")},
	}, 201, nil)
	s.waitStatus("ri_plain", "running", 90*time.Second)
	problems = s.verifyReverse(t, "ri_plain")
	require.Len(t, problems, 1, "%q", problems)
	require.Contains(t, problems[0], "wal_level=replica")
	s.mustDo("DELETE", "/v1/mirrors/ri_plain", nil, 200, nil)

	// The cut-over creates the unique index, which becomes the identity,
	// and a reverse mirror that reads the keyless tables.
	var out struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	s.mustDo("POST", "/v1/mirrors/ri/cutover", map[string]any{"lock_source": true, "reverse_mirror_name": "ri_back", "wait_seconds": 90}, 200, &out)
	require.Equal(t, "completed", out.Status, out.Message)
	require.Equal(t, "INDEX pk_idx_code", replicaIdentity(t, dst, "public.pk_idx"))
	s.waitStatus("ri_back", "running", 90*time.Second)
	exec1(t, dst, `UPDATE kl_full SET b = 'back' WHERE a <= 10; DELETE FROM kl_full WHERE a > 45;
		UPDATE kl_idx SET b = 'back' WHERE a <= 10; UPDATE pk_idx SET code = 'back' || id WHERE id <= 10`)
	waitEqual(t, dst, src, "kl_full", "kl_full", "a, b", 60*time.Second)
	waitEqual(t, dst, src, "kl_idx", "kl_idx", "a, b", 60*time.Second)
	waitEqual(t, dst, src, "pk_idx", "pk_idx", "id, code", 60*time.Second)
	require.Equal(t, int64(45), queryInt64(t, src, `SELECT count(*) FROM kl_full`))
}

// peerWarningView is one element of peer_warnings.
type peerWarningView struct {
	Peer    string    `json:"peer"`
	Role    string    `json:"role"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}

type peerWarningsView struct {
	Name         string            `json:"name"`
	Status       string            `json:"status"`
	PeerWarnings []peerWarningView `json:"peer_warnings"`
}

// TestCredentialWarning: when the source peer's password is changed (and
// when its role is made NOLOGIN), the mirror shows a peer warning with the
// database's message within one slot monitor interval, in GET and in the
// list, and logs it, while its replication, on the connection opened
// before, keeps applying the source's writes; once the login works again
// the warning is gone. No password appears anywhere.
func TestCredentialWarning(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := fmt.Sprintf("cred_user_%d", time.Now().UnixNano()%1_000_000_000)
	u, err := url.Parse(src)
	require.NoError(t, err)
	dbName := strings.TrimPrefix(u.Path, "/")
	exec1(t, src, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD 'first-secret-pw'; GRANT CREATE, CONNECT ON DATABASE %q TO %s;
		CREATE TABLE public.t (id bigserial PRIMARY KEY, v text); ALTER TABLE public.t OWNER TO %s;
		INSERT INTO public.t (v) SELECT 'x' FROM generate_series(1, 10)`, role, dbName, role, role))
	t.Cleanup(func() {
		exec1(t, src, fmt.Sprintf(`DROP OWNED BY %s CASCADE`, role))
		pgtest.Exec(t, pgtest.SourceCluster(t).URL("postgres"), `DROP ROLE IF EXISTS `+role)
	})
	u.User = url.UserPassword(role, "first-secret-pw")
	s := startService(t, catalog, "SERVICE_SLOT_MONITOR_INTERVAL=2s")
	s.createPeer("src", u.String())
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "cred", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	s.waitStatus("cred", "running", 90*time.Second)
	// A change that arrives shows the CDC stream is up on its connection.
	exec1(t, src, `INSERT INTO public.t (v) VALUES ('streaming')`)
	waitEqual(t, src, dst, "t", "t", "id, v", 30*time.Second)
	get := func() peerWarningsView {
		var v peerWarningsView
		s.mustDo("GET", "/v1/mirrors/cred", nil, 200, &v)
		return v
	}
	require.Empty(t, get().PeerWarnings)

	const interval = 2 * time.Second
	for _, c := range []struct{ name, breakSQL, want, restoreSQL string }{
		{"password changed", `ALTER ROLE %s PASSWORD 'second-secret-pw'`, "password authentication failed", `ALTER ROLE %s PASSWORD 'first-secret-pw'`},
		{"role made NOLOGIN", `ALTER ROLE %s NOLOGIN`, "is not permitted to log in", `ALTER ROLE %s LOGIN`},
	} {
		broken := time.Now()
		exec1(t, src, fmt.Sprintf(c.breakSQL, role))
		var v peerWarningsView
		// One interval, plus room for a loaded test machine.
		for deadline := broken.Add(interval + 20*time.Second); ; time.Sleep(200 * time.Millisecond) {
			if v = get(); len(v.PeerWarnings) > 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s: no peer warning %s after the change", c.name, time.Since(broken))
		}
		t.Logf("%s: peer warning after %s (slot monitor interval %s)", c.name, time.Since(broken).Round(time.Millisecond), interval)
		require.Len(t, v.PeerWarnings, 1)
		w := v.PeerWarnings[0]
		require.Equal(t, "src", w.Peer, c.name)
		require.Equal(t, "source", w.Role, c.name)
		require.Contains(t, w.Message, c.want, c.name)
		require.Contains(t, w.Message, role, c.name)
		require.Equal(t, "running", v.Status, "%s: replication on the open connection goes on", c.name)
		var list []peerWarningsView
		s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
		require.Len(t, list, 1)
		require.Len(t, list[0].PeerWarnings, 1, "the list shows it too")
		s.waitLog("cred", "Peer refuses connections", 10*time.Second, func(e logEntry) bool {
			msg, _ := e.Details["error"].(string)
			return e.Level == "WARN" && strings.Contains(msg, c.want)
		})

		// Replication keeps running meanwhile: the source's writes arrive.
		exec1(t, src, `INSERT INTO public.t (v) SELECT 'during' FROM generate_series(1, 20)`)
		waitEqual(t, src, dst, "t", "t", "id, v", 30*time.Second)
		require.Equal(t, "running", get().Status)
		require.NotEmpty(t, get().PeerWarnings, "%s: still refused", c.name)

		fixed := time.Now()
		exec1(t, src, fmt.Sprintf(c.restoreSQL, role))
		for deadline := fixed.Add(interval + 20*time.Second); ; time.Sleep(200 * time.Millisecond) {
			if v = get(); len(v.PeerWarnings) == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s: peer warning still shown %s after the fix: %+v", c.name, time.Since(fixed), v.PeerWarnings)
		}
		s.waitLog("cred", "Peer accepts connections again", 10*time.Second, nil)
	}
	for _, secret := range []string{"first-secret-pw", "second-secret-pw"} {
		require.NotContains(t, s.output.String(), secret, "the process log shows a password")
		var raw string
		queryOne(t, catalog, &raw, `SELECT coalesce(string_agg(message || details::text, ' '), '') FROM mirror_logs`)
		require.NotContains(t, raw, secret, "the mirror log shows a password")
	}
	exec1(t, src, `INSERT INTO public.t (v) VALUES ('after')`)
	waitEqual(t, src, dst, "t", "t", "id, v", 30*time.Second)
}

// TestCutoverLockSourceNoDeadlock: a cut-over with lock_source against a
// long transaction writing a table is refused cleanly after its bound;
// under an application that writes two tables in opposite orders (and reads a
// third) in every transaction: the lock never deadlocks with it (no 40P01
// anywhere), the writers that meet the read-only tables get the
// cut-over's refusal, and the cut-over either completes with the tables
// equal or is refused cleanly (409, tables writable again, the mirror
// replicating) and completes on a later attempt.
func TestCutoverLockSourceNoDeadlock(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `
		CREATE TABLE a (id bigserial PRIMARY KEY, v int);
		CREATE TABLE b (id bigserial PRIMARY KEY, v int);
		CREATE TABLE c (id int PRIMARY KEY);
		INSERT INTO c VALUES (1)`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "dl", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "a", "public", "a"), mapping("public", "b", "public", "b"), mapping("public", "c", "public", "c")},
	}, 201, nil)
	s.waitStatus("dl", "running", 90*time.Second)
	ctx := context.Background()

	// A transaction that keeps writing table b open: the lock step gives
	// up after its bound with a clear 409 naming the table, leaves no
	// table read-only (a was made read-only first and writable again), and
	// the mirror goes on replicating.
	long, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer long.Close(ctx)
	longTx, err := long.Begin(ctx)
	require.NoError(t, err)
	_, err = longTx.Exec(ctx, `INSERT INTO b (v) VALUES (42)`)
	require.NoError(t, err)
	var refusal struct {
		Error string `json:"error"`
	}
	started := time.Now()
	require.Equal(t, 409, s.do("POST", "/v1/mirrors/dl/cutover", map[string]any{"lock_source": true, "wait_seconds": 90}, &refusal))
	t.Logf("refused after %s: %s", time.Since(started).Round(time.Millisecond), refusal.Error)
	for _, want := range []string{"make_source_read_only", "lock source table public.b", "stayed busy", "keeps replicating"} {
		require.Contains(t, refusal.Error, want)
	}
	require.Zero(t, queryInt64(t, src, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgmirror_read_only%'`), "a refused cut-over left no table read-only")
	require.NoError(t, longTx.Commit(ctx))
	exec1(t, src, `INSERT INTO a (v) VALUES (43)`)
	waitEqual(t, src, dst, "a", "a", "id, v", 30*time.Second)
	waitEqual(t, src, dst, "b", "b", "id, v", 30*time.Second)
	require.Equal(t, "running", s.mirror("dl").Status)

	const writers = 6
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var committed, refused atomic.Int64
	var mu sync.Mutex
	var unexpected []string
	for w := range writers {
		conn, err := pgx.Connect(ctx, src)
		require.NoError(t, err)
		first, second := "a", "b"
		if w%2 == 1 {
			first, second = "b", "a"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(ctx)
			for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); {
				select {
				case <-stop:
					return
				default:
				}
				_, err := conn.Exec(ctx, `BEGIN; SELECT count(*) FROM c; INSERT INTO `+first+` (v) VALUES (1);
					SELECT pg_sleep(0.002); INSERT INTO `+second+` (v) VALUES (2); COMMIT`)
				var pgErr *pgconn.PgError
				switch {
				case err == nil:
					committed.Add(1)
				case errors.As(err, &pgErr) && pgErr.Code == "25006":
					refused.Add(1)
					_, _ = conn.Exec(ctx, `ROLLBACK`)
					time.Sleep(5 * time.Millisecond)
				default:
					_, _ = conn.Exec(ctx, `ROLLBACK`)
					mu.Lock()
					unexpected = append(unexpected, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	t.Cleanup(halt)
	waitGrown(t, "writer transactions", &committed, 200, 30*time.Second)

	var out struct {
		Status  string       `json:"status"`
		Message string       `json:"message"`
		Error   string       `json:"error"`
		Cutover *cutoverView `json:"cutover"`
	}
	completed := false
	for attempt := 1; attempt <= 5 && !completed; attempt++ {
		code := s.do("POST", "/v1/mirrors/dl/cutover", map[string]any{"lock_source": true, "wait_seconds": 90, "quiet_seconds": 0}, &out)
		switch {
		case code == 200:
			require.Equal(t, "completed", out.Status, out.Message)
			completed = true
			for _, st := range out.Cutover.Steps {
				if st.Name == "make_source_read_only" {
					t.Logf("attempt %d: make_source_read_only took %d ms under the load", attempt, st.DurationMS)
				}
			}
		case code == 409 && strings.Contains(out.Error, "stayed busy"):
			t.Logf("attempt %d refused: %s", attempt, out.Error)
			require.NotContains(t, out.Error, "40P01")
			require.Zero(t, queryInt64(t, src, `SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'pgmirror_read_only%'`), "a refused cut-over left no table read-only")
			s.waitStatus("dl", "running", 30*time.Second)
		default:
			t.Fatalf("cut-over attempt %d: %d %s %s", attempt, code, out.Error, out.Message)
		}
	}
	require.True(t, completed, "the cut-over completed within 5 attempts")
	halt()
	mu.Lock()
	require.Empty(t, unexpected, "writers failed otherwise than refused by the read-only tables (deadlocks?)")
	mu.Unlock()
	require.Positive(t, refused.Load(), "writers met the read-only tables")
	t.Logf("writers committed %d transactions, %d refused by the read-only source", committed.Load(), refused.Load())
	for _, tbl := range []string{"a", "b"} {
		sc, sd := tableDigest(t, src, tbl, "id, v")
		dc, dd := tableDigest(t, dst, tbl, "id, v")
		require.Equal(t, sc, dc, "table %s: rows", tbl)
		require.Equal(t, sd, dd, "table %s: digest", tbl)
	}
}
