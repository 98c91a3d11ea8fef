package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestExistingSlotAndPublication: a slot of the mirror's name that pgmirror
// did not create puts the mirror in error with "Replication slot already
// exists" (and deleting the mirror leaves that slot alone); an existing
// publication that covers the mapped tables is used and kept on delete; one
// that does not cover them is a clear error.
func TestExistingSlotAndPublication(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	suffix := strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)
	foreignSlot := "foreign_slot_" + suffix
	foreignPub := "foreign_pub_" + suffix
	exec1(t, src, `CREATE TABLE public.t (id int PRIMARY KEY, v text); CREATE TABLE public.u (id int PRIMARY KEY);
		INSERT INTO public.t SELECT g, 'v' FROM generate_series(1, 50) g`)
	exec1(t, src, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE public.t`, foreignPub))
	exec1(t, src, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, foreignSlot)
	t.Cleanup(func() {
		if slotExists(t, src, foreignSlot) {
			exec1(t, src, `SELECT pg_drop_replication_slot($1)`, foreignSlot)
		}
	})

	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)

	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "slotclash", "source_peer": "src", "destination_peer": "dst", "replication_slot_name": foreignSlot,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	m := s.waitStatus("slotclash", "error", 60*time.Second)
	if !strings.Contains(m.ErrorMessage, foreignSlot) {
		t.Errorf("error_message %q does not name the slot", m.ErrorMessage)
	}
	e := s.waitLog("slotclash", "Replication slot already exists", 10*time.Second, levelIs("ERROR"))
	for _, key := range []string{"error", "retry_count", "next_retry_at", "operation"} {
		if _, ok := e.Details[key]; !ok {
			t.Errorf("error entry has no %s: %v", key, e.Details)
		}
	}
	s.mustDo("DELETE", "/v1/mirrors/slotclash", nil, 200, nil)

	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "reuse", "source_peer": "src", "destination_peer": "dst", "publication_name": foreignPub,
		"cdc_sync_interval_seconds": 1,
		"table_mappings":            []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	s.waitStatus("reuse", "running", 60*time.Second)
	exec1(t, src, `INSERT INTO public.t VALUES (100, 'cdc')`)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 30*time.Second)
	s.waitLog("reuse", "Using existing publication", 10*time.Second, levelIs("INFO"))
	s.mustDo("DELETE", "/v1/mirrors/reuse", nil, 200, nil)
	// A mirror being deleted still holds its names until its cleanup ran.
	waitFor(t, "the cleanup of mirror reuse", 30*time.Second, func() bool {
		var n int
		pgxConnQuery(t, catalog, `SELECT count(*) FROM mirrors WHERE name = 'reuse'`, &n)
		return n == 0
	})

	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "uncovered", "source_peer": "src", "destination_peer": "dst", "publication_name": foreignPub,
		"table_mappings": []any{mapping("public", "u", "public", "u")},
	}, 201, nil)
	m = s.waitStatus("uncovered", "error", 60*time.Second)
	if !strings.Contains(m.ErrorMessage, "does not publish public.u") {
		t.Errorf("error_message %q does not say which table the publication lacks", m.ErrorMessage)
	}
	s.mustDo("DELETE", "/v1/mirrors/uncovered", nil, 200, nil)

	// Give the cleanup jobs time to run: the foreign slot and publication stay.
	waitFor(t, "the deleted mirrors' cleanup", 30*time.Second, func() bool {
		var n int
		pgxConnQuery(t, catalog, `SELECT count(*) FROM mirrors`, &n)
		return n == 0
	})
	if !slotExists(t, src, foreignSlot) {
		t.Error("deleting the mirror dropped a slot it did not create")
	}
	if !publicationExists(t, src, foreignPub) {
		t.Error("deleting the mirror dropped a publication it did not create")
	}
}

// TestForeignKeyViolation: with a destination user that may not disable
// triggers (not a superuser), a destination foreign key that the source
// does not have rejects a change: the mirror logs the WARN "Foreign key
// violation" and goes to error; once the key is dropped it recovers and
// ends equal.
func TestForeignKeyViolation(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	schema := `CREATE TABLE public.parent (id int PRIMARY KEY); CREATE TABLE public.child (id int PRIMARY KEY, parent_id int);`
	exec1(t, src, schema+`INSERT INTO public.parent VALUES (1); INSERT INTO public.child VALUES (1, 1);`)
	exec1(t, dst, schema+`ALTER TABLE public.child ADD CONSTRAINT child_parent FOREIGN KEY (parent_id) REFERENCES public.parent (id);`)
	role := "fk_user_" + strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 36)
	u, err := url.Parse(dst)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	exec1(t, dst, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'fk-secret-pw'; GRANT CREATE, CONNECT ON DATABASE %q TO %s;
		GRANT ALL ON SCHEMA public TO %s; GRANT ALL ON ALL TABLES IN SCHEMA public TO %s`, role, dbName, role, role, role))
	u.User = url.UserPassword(role, "fk-secret-pw")

	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", u.String())
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "fk", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "parent", "public", "parent"), mapping("public", "child", "public", "child")},
	}, 201, nil)
	s.waitStatus("fk", "running", 60*time.Second)

	// A parent inserted before its child in one transaction applies fine
	// (changes are written in source order when foreign keys are checked).
	exec1(t, src, `BEGIN; INSERT INTO public.parent VALUES (2); INSERT INTO public.child VALUES (2, 2); COMMIT`)
	waitEqual(t, src, dst, "public.child", "public.child", "id, parent_id", 30*time.Second)

	// The source has no such key: a child without a parent is rejected.
	exec1(t, src, `INSERT INTO public.child VALUES (3, 99)`)
	s.waitLog("fk", "Foreign key violation", 60*time.Second, levelIs("WARN"))
	s.waitStatus("fk", "error", 10*time.Second)

	exec1(t, dst, `ALTER TABLE public.child DROP CONSTRAINT child_parent`)
	s.mustDo("POST", "/v1/mirrors/fk/retry", nil, 200, nil)
	s.waitStatus("fk", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.child", "public.child", "id, parent_id", 30*time.Second)
}

// levelIs matches log entries of one level.
func levelIs(level string) func(logEntry) bool {
	return func(e logEntry) bool { return e.Level == level }
}

// TestPeerRejectsLogin: a wrong peer password is reported as such (not as a
// timeout), without the password, and fixing the peer heals the mirror.
func TestPeerRejectsLogin(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.t (id int PRIMARY KEY, v text)`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "login", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	s.waitStatus("login", "running", 60*time.Second)

	const wrong = "Wrong-Password-4711"
	u, err := url.Parse(dst)
	if err != nil {
		t.Fatal(err)
	}
	good, _ := u.User.Password()
	s.mustDo("POST", "/v1/mirrors/login/pause", nil, 200, nil)
	// Wait until the worker has let go of the slot: a resume before that
	// would just let the running CDC (and its open connections) go on.
	waitFor(t, "the paused mirror's slot to be released", 30*time.Second, func() bool {
		return queryInt64(t, src, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgmirror_slot_login' AND active`) == 0
	})
	s.mustDo("PUT", "/v1/peers/dst", map[string]any{"password": wrong}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/login/resume", nil, 200, nil)
	m := s.waitStatus("login", "error", 60*time.Second)
	if !strings.Contains(m.ErrorMessage, "password") || strings.Contains(m.ErrorMessage, wrong) {
		t.Errorf("error_message %q: want the reason (password authentication) and never the password", m.ErrorMessage)
	}
	e := s.waitLog("login", "Peer rejected the connection", 10*time.Second, levelIs("ERROR"))
	if strings.Contains(fmt.Sprint(e.Details), wrong) {
		t.Error("log entry contains the peer password")
	}
	if strings.Contains(s.output.String(), wrong) {
		t.Error("process log contains the peer password")
	}
	s.mustDo("PUT", "/v1/peers/dst", map[string]any{"password": good}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/login/retry", nil, 200, nil)
	s.waitStatus("login", "running", 60*time.Second)
	exec1(t, src, `INSERT INTO public.t VALUES (1, 'healed')`)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 30*time.Second)
}
