package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// DB is what the metadata functions need: a *pgx.Conn, a pgx.Tx or a
// *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const ensureMetaSQL = `CREATE SCHEMA IF NOT EXISTS _pgmirror;
CREATE TABLE IF NOT EXISTS _pgmirror.applied (
	mirror_uid text PRIMARY KEY,
	lsn pg_lsn NOT NULL,
	batch_id bigint NOT NULL,
	updated_at timestamptz
)`

// EnsureMeta creates the destination metadata schema _pgmirror and its
// table _pgmirror.applied (one row per mirror: the end LSN of the last
// source transaction applied, and the last batch id) when they are absent.
func EnsureMeta(ctx context.Context, conn DB) error {
	var err error
	for range 3 {
		_, err = conn.Exec(ctx, ensureMetaSQL)
		var pgErr *pgconn.PgError
		// Two mirrors creating the schema at once race on the catalog's
		// unique indexes; the loser retries and then finds it.
		if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06" || pgErr.Code == "42P07") {
			continue
		}
		break
	}
	if err != nil {
		return fmt.Errorf("create destination metadata table _pgmirror.applied: %w", err)
	}
	return nil
}

// AppliedPosition reads the mirror's applied position from the destination:
// the end LSN of the last source transaction applied and the id of the
// batch that applied it. found is false when the mirror has none yet.
func AppliedPosition(ctx context.Context, conn DB, mirrorUID string) (lsn change.LSN, batchID int64, found bool, err error) {
	var text string
	err = conn.QueryRow(ctx, `SELECT lsn::text, batch_id FROM _pgmirror.applied WHERE mirror_uid = $1`, mirrorUID).Scan(&text, &batchID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read applied position of mirror %s: %w", mirrorUID, err)
	}
	if lsn, err = change.ParseLSN(text); err != nil {
		return 0, 0, false, fmt.Errorf("read applied position of mirror %s: %w", mirrorUID, err)
	}
	return lsn, batchID, true, nil
}

// SetAppliedPosition records the mirror's applied position (used after the
// snapshot, with the slot's consistent point and batch 0, and by every
// batch inside its own transaction).
func SetAppliedPosition(ctx context.Context, conn DB, mirrorUID string, lsn change.LSN, batchID int64) error {
	_, err := conn.Exec(ctx, `INSERT INTO _pgmirror.applied (mirror_uid, lsn, batch_id, updated_at)
		VALUES ($1, $2::text::pg_lsn, $3, now())
		ON CONFLICT (mirror_uid) DO UPDATE SET lsn = EXCLUDED.lsn, batch_id = EXCLUDED.batch_id, updated_at = EXCLUDED.updated_at`,
		mirrorUID, lsn.String(), batchID)
	if err != nil {
		return fmt.Errorf("record applied position %s of mirror %s: %w", lsn, mirrorUID, err)
	}
	return nil
}
