package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// EmitMarker writes a transactional logical decoding message on the source
// (prefix pgmirror_marker, content note) and returns its position. Every
// transaction that committed before the call commits before that position
// and every later one at or after it, and the marker itself comes through
// the slot as an empty transaction: a run with Config.StopAt set to the
// position applies exactly the transactions committed before the call.
func EmitMarker(ctx context.Context, src *pgx.Conn, note string) (change.LSN, error) {
	var text string
	if err := src.QueryRow(ctx, `SELECT pg_logical_emit_message(true, 'pgmirror_marker', $1)::text`, note).Scan(&text); err != nil {
		return 0, fmt.Errorf("write a marker on the source (pg_logical_emit_message): %w", err)
	}
	lsn, err := change.ParseLSN(text)
	if err != nil {
		return 0, fmt.Errorf("write a marker on the source: %w", err)
	}
	return lsn, nil
}
