package cdc_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

type logReporter struct{ log *slog.Logger }

func (r logReporter) BatchApplied(_ context.Context, b cdc.Batch) error {
	r.log.Info("CDC batch applied successfully", "batch_id", b.ID, "lsn", b.LSN.String(), "rows_processed", b.Changes)
	return nil
}

// Example shows the setup a mirror needs before CDC (publication, slot,
// snapshot position) and a CDC run.
func Example() {
	ctx := context.Background()
	src, err := pgx.ParseConfig("postgres://app:pw@source/db")
	if err != nil {
		return
	}
	dst, err := pgx.ParseConfig("postgres://app:pw@dest/db")
	if err != nil {
		return
	}
	mappings := []change.Mapping{{
		Source:      change.TableName{Schema: "public", Name: "orders"},
		Destination: change.TableName{Schema: "public", Name: "orders"},
	}}

	conn, err := pgx.ConnectConfig(ctx, src)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	if _, err := capture.EnsurePublication(ctx, conn, "pgmirror_orders", []change.TableName{mappings[0].Source}); err != nil {
		return
	}
	repl, err := capture.ConnectReplication(ctx, &src.Config)
	if err != nil {
		return
	}
	slot, err := capture.CreateSlot(ctx, repl, "pgmirror_orders", true)
	if err != nil {
		return
	}
	// ... snapshot every table with SET TRANSACTION SNAPSHOT slot.SnapshotName
	// while repl stays idle, then close repl and record where CDC starts:
	_ = repl.Close(ctx)
	dconn, err := pgx.ConnectConfig(ctx, dst)
	if err != nil {
		return
	}
	defer dconn.Close(ctx)
	if err := positions.Ensure(ctx, dconn); err != nil {
		return
	}
	if err := positions.SnapshotTaken(ctx, dconn, "mirror-uid", slot.ConsistentPoint, 0); err != nil {
		return
	}

	stop := make(chan struct{}) // closed on pause
	_ = cdc.Run(ctx, cdc.Config{
		MirrorUID: "mirror-uid", Source: src, Dest: dst,
		SlotName: "pgmirror_orders", PublicationName: "pgmirror_orders", Tables: mappings,
		BatchSize: 10000, SyncInterval: 60 * time.Second, Logger: slog.Default(),
	}, logReporter{slog.Default()}, stop)
}
