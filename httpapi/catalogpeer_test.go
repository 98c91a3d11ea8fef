package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// catalogPeer is a peer body that points at the test's own catalog database.
func (b *bundle) catalogPeer(name, host, user, password string) map[string]any {
	b.t.Helper()
	var database string
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&database))
	return map[string]any{"name": name, "host": host, "port": pgtest.CatalogCluster(b.t).Port(), "user": user,
		"password": password, "database": database, "ssl_mode": "disable"}
}

func TestPeerPointingAtCatalogRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	catalog := pgtest.CatalogCluster(t)
	ensurePeerRole(t, catalog)

	// Create: refused whatever the host is called.
	for _, host := range []string{"127.0.0.1", "localhost"} {
		b.requireError(http.MethodPost, "/v1/peers", b.adminToken, b.catalogPeer("cat", host, peerRole, peerPassword),
			http.StatusBadRequest, `Peer "cat" points at pgmirror's own catalog database`, "another database")
	}
	b.mustDo(http.MethodGet, "/v1/peers/cat", b.adminToken, nil, http.StatusNotFound)

	// Another database of the catalog's server is a fine peer (the embedded
	// catalog is a demo source); updating it onto the catalog is refused.
	other := with(b.catalogPeer("neighbour", "127.0.0.1", peerRole, peerPassword), "database", "postgres")
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, other, http.StatusCreated)
	catalogDB := b.catalogPeer("x", "", "", "")["database"]
	b.requireError(http.MethodPut, "/v1/peers/neighbour", b.adminToken, map[string]any{"database": catalogDB},
		http.StatusBadRequest, `Peer "neighbour" points at pgmirror's own catalog database`)
	var got peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers/neighbour", b.adminToken, nil, http.StatusOK, &got)
	require.Equal(t, "postgres", got.Database, "a refused update must change nothing")

	// A peer stored before this check existed: every connection the API
	// makes to it refuses it (test, tables, mirror as source or destination).
	stored := b.catalogPeer("legacy", "127.0.0.1", peerRole, peerPassword)
	_, err := b.store.PeerCreate(context.Background(), db.PeerCreateParams{Name: "legacy", Host: "127.0.0.1",
		Port: stored["port"].(int), User: peerRole, Password: peerPassword, Database: stored["database"].(string), SSLMode: "disable"})
	require.NoError(t, err)
	b.requireError(http.MethodPost, "/v1/peers/legacy/test", b.adminToken, nil, http.StatusBadRequest, `Peer "legacy" points at pgmirror's own catalog database`)
	b.requireError(http.MethodGet, "/v1/peers/legacy/tables", b.viewerToken, nil, http.StatusBadRequest, `Peer "legacy" points at pgmirror's own catalog database`)
	b.sourceDB("src", `CREATE TABLE public.t (id int PRIMARY KEY)`)
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{
		"name": "m1", "source_peer": "legacy", "destination_peer": "src", "table_mappings": []any{mapping("users", "users")},
	}, http.StatusBadRequest, `Peer "legacy" points at pgmirror's own catalog database`)
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{
		"name": "m2", "source_peer": "src", "destination_peer": "legacy", "table_mappings": []any{mapping("t", "t")},
	}, http.StatusBadRequest, `Peer "legacy" points at pgmirror's own catalog database`)
	b.mustDo(http.MethodGet, "/v1/mirrors/m2", b.adminToken, nil, http.StatusNotFound)
}

// A peer user that may not read the system identifier is still recognised
// (by the server's start time).
func TestCatalogPeerRecognisedWithoutSystemIdentifier(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role, password := "pgmirror_test_plain", "plain-peer-password-7Kq"
	pgtest.Exec(t, pgtest.CatalogCluster(t).URL("postgres"), fmt.Sprintf(`DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN
			CREATE ROLE %s LOGIN PASSWORD '%s';
		END IF; END $$`, role, role, password))
	b.exec(`REVOKE EXECUTE ON FUNCTION pg_catalog.pg_control_system() FROM PUBLIC`)
	var granted bool
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT has_function_privilege($1, 'pg_catalog.pg_control_system()', 'EXECUTE')`, role).Scan(&granted))
	require.False(t, granted)

	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, b.catalogPeer("cat", "127.0.0.1", role, password),
		http.StatusBadRequest, `Peer "cat" points at pgmirror's own catalog database`)
}
