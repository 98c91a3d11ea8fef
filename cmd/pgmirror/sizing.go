package main

import (
	"fmt"
	"net/url"
	"strings"
)

// The catalog connections of one replica come in three parts, none of which
// grows with the mirrors it runs:
//   - the shared pool (API requests and the short status writes of mirror
//     runs): catalogPoolSize, from pool_max_conns in SERVICE_DATABASE_URL or
//     derived from SERVICE_MIRROR_WORKERS;
//   - River's own pool (riverPoolConns): job fetches, leader election, its
//     notifier and maintenance never wait behind mirror runs or API calls;
//   - one connection that holds the session advisory locks of every mirror
//     the replica runs and listens for control requests (db.LockHolder).
//
// docs/operations.md gives the resulting formula.

// riverPoolConns is the size of River's own catalog pool.
const riverPoolConns = 8

// defaultCatalogPoolSize is the shared pool's size for workers mirror
// workers when SERVICE_DATABASE_URL does not set pool_max_conns: 20, plus
// one per 10 workers above 100 (30 for the default 200). Mirror runs use it
// only for short, batched status writes, so it does not grow with them.
func defaultCatalogPoolSize(workers int) int32 {
	return int32(max(20, 10+workers/10))
}

// minCatalogPoolSize is the smallest shared pool that serves workers mirror
// workers without API requests queueing for long behind their status
// writes: 4 for the API, plus one per 10 workers.
func minCatalogPoolSize(workers int) int32 {
	return int32(4 + (workers+9)/10)
}

// catalogPoolSize returns the shared catalog pool's size: the URL's
// pool_max_conns (parsed into parsed) when it sets one, checked against
// SERVICE_MIRROR_WORKERS, otherwise derived from it.
func catalogPoolSize(databaseURL string, parsed int32, workers int) (int32, error) {
	if !setsPoolMaxConns(databaseURL) {
		return defaultCatalogPoolSize(workers), nil
	}
	if need := minCatalogPoolSize(workers); parsed < need {
		return 0, fmt.Errorf("SERVICE_DATABASE_URL sets pool_max_conns=%d, too few catalog connections for SERVICE_MIRROR_WORKERS=%d: "+
			"raise pool_max_conns to at least %d (or remove it: pgmirror then sizes the pool itself), or lower SERVICE_MIRROR_WORKERS",
			parsed, workers, need)
	}
	return parsed, nil
}

// setsPoolMaxConns reports whether the connection string (URL or
// keyword/value form) sets pool_max_conns.
func setsPoolMaxConns(conn string) bool {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		return err == nil && u.Query().Has("pool_max_conns")
	}
	for _, field := range strings.Fields(conn) {
		if strings.HasPrefix(field, "pool_max_conns=") {
			return true
		}
	}
	return false
}
