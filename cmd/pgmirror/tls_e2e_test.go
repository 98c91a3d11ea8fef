package main

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestMirrorOverVerifiedTLS replicates from a source whose server
// certificate is signed by the test's own CA, with ssl_mode verify-full and
// the CA given as the peer's ssl_root_cert: the snapshot, the replication
// stream and CDC all connect with it.
func TestMirrorOverVerifiedTLS(t *testing.T) {
	t.Parallel()
	ca := pgtest.NewCA(t)
	cluster := pgtest.NewTLSCluster(t, ca, "localhost")
	src := pgtest.NewDatabase(t, cluster)
	exec1(t, src, `CREATE TABLE items (id int PRIMARY KEY, name text);
		INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 500) g`)
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	s := startService(t, catalog)
	s.createPeer("dst", dst)

	u, err := url.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	peer := map[string]any{"name": "tls-src", "host": "localhost", "port": cluster.Port(), "user": u.User.Username(),
		"password": pw, "database": strings.TrimPrefix(u.Path, "/"), "ssl_mode": "verify-full"}
	s.mustDo("POST", "/v1/peers", peer, 201, nil)
	var bad map[string]any
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "tls", "source_peer": "tls-src", "destination_peer": "dst",
		"table_mappings": []any{mapping("public", "items", "public", "items")}}, 400, &bad)
	if msg, _ := bad["error"].(string); !strings.Contains(msg, "ssl_root_cert") {
		t.Fatalf("a mirror from a peer whose certificate does not verify: want an error about ssl_root_cert, got %v", bad)
	}

	s.mustDo("PUT", "/v1/peers/tls-src", map[string]any{"ssl_root_cert": ca.PEM()}, 200, nil)
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "tls", "source_peer": "tls-src", "destination_peer": "dst",
		"cdc_sync_interval_seconds": 1, "table_mappings": []any{mapping("public", "items", "public", "items")}}, 201, nil)
	s.waitStatus("tls", "running", 90*time.Second)
	waitEqual(t, src, dst, "public.items", "public.items", "id, name", 30*time.Second)
	exec1(t, src, `INSERT INTO items SELECT g, 'new ' || g FROM generate_series(501, 600) g; UPDATE items SET name = 'changed' WHERE id <= 10`)
	waitEqual(t, src, dst, "public.items", "public.items", "id, name", 30*time.Second)

	// The replication stream itself runs over TLS.
	if n := queryInt64(t, src, `SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE s.ssl`); n != 1 {
		t.Fatalf("%d replication connections use TLS, want 1", n)
	}
}
