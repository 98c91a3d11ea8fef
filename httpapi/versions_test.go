package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestUnsupportedServerRefused: a peer on PostgreSQL 11, older than the
// oldest version pgmirror supports (12), fails the peer test and is refused
// as source and as destination of a new mirror with a 400 that states the
// minimum; nothing is created. A PostgreSQL 13 peer passes, but not with
// capture_ddl.
func TestUnsupportedServerRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := pgtest.NewClusterVersion(t, 11, true)
	ensurePeerRole(t, old)
	url := pgtest.NewDatabase(t, old)
	pgtest.Exec(t, url, `CREATE TABLE orders (id int PRIMARY KEY)`)
	b.createPeer("old", old.Port(), dbName(url))

	var test peerTest
	b.mustDecode(http.MethodPost, "/v1/peers/old/test", b.adminToken, nil, http.StatusOK, &test)
	require.False(t, test.Success)
	require.Nil(t, test.Version)
	require.Contains(t, test.Error, "PostgreSQL 11.")
	require.Contains(t, test.Error, "PostgreSQL 12 or later")

	// As the source.
	b.destPeer("dst")
	body := mirrorBody("m")
	body["source_peer"] = "old"
	msg := b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusBadRequest, `"old"`, "PostgreSQL 11.", "PostgreSQL 12 or later")
	require.Contains(t, msg, "source database")

	// As the destination.
	b.sourceDB("src", sourceSchema)
	body = mirrorBody("m")
	body["destination_peer"] = "old"
	msg = b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusBadRequest, `"old"`, "PostgreSQL 11.", "PostgreSQL 12 or later")
	require.Contains(t, msg, "destination database")

	require.Zero(t, b.jobCount("mirror_run"))
	raw := b.mustDo(http.MethodGet, "/v1/mirrors", b.viewerToken, nil, http.StatusOK)
	require.JSONEq(t, `[]`, string(raw))

	// A supported peer of another major passes the test; capture_ddl,
	// whose statements travel in pgoutput messages (14+), is refused there.
	newer := pgtest.NewClusterVersion(t, 13, true)
	ensurePeerRole(t, newer)
	url13 := pgtest.NewDatabase(t, newer)
	pgtest.Exec(t, url13, `CREATE TABLE orders (id int PRIMARY KEY)`)
	b.createPeer("pg13", newer.Port(), dbName(url13))
	test = peerTest{}
	b.mustDecode(http.MethodPost, "/v1/peers/pg13/test", b.adminToken, nil, http.StatusOK, &test)
	require.True(t, test.Success, test.Error)
	require.NotNil(t, test.Version)
	require.Regexp(t, `^13\.`, *test.Version)
	body = mirrorBody("m")
	body["source_peer"] = "pg13"
	body["capture_ddl"] = true
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusBadRequest, `"pg13"`, "PostgreSQL 13.", "from PostgreSQL 14 on", "capture_ddl off")
	require.Zero(t, b.jobCount("mirror_run"))
}
