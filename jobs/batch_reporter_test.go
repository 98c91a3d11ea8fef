package jobs

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// catalogRun returns a run of a new mirror with tables orders and items on
// a fresh, migrated catalog.
func catalogRun(t *testing.T) (*mirrorRun, db.Mirror) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, db.Migrate(ctx, pool, logger))
	store := db.New(pool, pgtest.Keyring(t))
	peer, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: "p", Host: "h", Port: 1, User: "u", Password: "pw", Database: "d", SSLMode: "disable"})
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	table := func(name string) change.Mapping {
		n := change.TableName{Schema: "public", Name: name}
		return change.Mapping{Source: n, Destination: n}
	}
	m, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{Name: "m", SourcePeerID: peer.ID, DestinationPeerID: peer.ID,
		SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1,
		CDCSyncIntervalSeconds: 60, CDCBatchSize: 100, PublicationName: "pub", ReplicationSlotName: "slot",
		Tables: []change.Mapping{table("orders"), table("items")}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	r := &mirrorRun{cfg: Config{Store: store, Logger: logger}, store: store, mirrorID: m.ID, name: m.Name, logger: logger}
	return r, m
}

// The batch reporter sums many batches into catalog counters and position
// and into one pair of log entries, off the apply path, and writes what is
// left when it closes.
func TestBatchReporter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, m := catalogRun(t)
	store := r.store.(*db.Store)
	rep := newBatchReporter(r, m, nil)
	orders := change.TableName{Schema: "public", Name: "orders"}
	items := change.TableName{Schema: "public", Name: "items"}
	other := change.TableName{Schema: "public", Name: "not_mapped"}
	for i := int64(1); i <= 50; i++ {
		require.NoError(t, rep.BatchApplied(ctx, cdc.Batch{ID: i, LSN: change.LSN(0x1000 + i), Changes: 3, Duration: time.Millisecond,
			Streamed: i == 7, // a large transaction applied while the source streamed it
			Tables: map[change.TableName]change.Counts{
				orders: {Inserted: 2},
				items:  {Updated: 1, Truncated: 1},
				other:  {Deleted: 9},
			}}))
	}
	// Progress reaches the catalog by itself, within a few flush intervals.
	require.Eventually(t, func() bool {
		got, err := r.store.MirrorGetByID(ctx, m.ID)
		return err == nil && got.LastSyncBatchID == 50
	}, 10*time.Second, 50*time.Millisecond)
	rep.close(ctx)

	got, err := r.store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, change.LSN(0x1000+50).String(), *got.LastLSN)
	tables, err := r.store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	byName := map[string]db.MirrorTable{}
	for _, t := range tables {
		byName[t.SourceTable] = t
	}
	require.Equal(t, int64(100), byName["orders"].RowsInserted)
	require.Equal(t, int64(50), byName["items"].RowsUpdated)
	require.Equal(t, int64(100), byName["orders"].RowsSynced)
	require.Equal(t, int64(50), byName["items"].RowsSynced, "truncates are not rows")

	entries, _, err := store.LogList(ctx, db.LogQuery{MirrorID: m.ID, Limit: 100})
	require.NoError(t, err)
	var applied []db.CDCBatchDetails
	for _, e := range entries {
		if e.Message == db.MsgCDCBatchApplied {
			var d db.CDCBatchDetails
			require.NoError(t, json.Unmarshal(e.Details, &d))
			applied = append(applied, d)
		}
	}
	require.Len(t, applied, 1, "50 quick batches give one summary entry")
	require.Equal(t, int64(150), applied[0].RowsProcessed)
	require.Equal(t, int64(50), applied[0].BatchID)
	require.Equal(t, []string{"public.items", "public.orders"}, applied[0].TablesAffected)
	require.Equal(t, int64(1), applied[0].StreamedTransactions, "the entry counts the transactions applied while they streamed")
}
