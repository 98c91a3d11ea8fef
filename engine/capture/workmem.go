package capture

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// streamingWorkMemKB is the most of its transactions a streaming source's
// walsender keeps decoded for pgmirror's slot before it streams the
// largest (its logical_decoding_work_mem, in kB). PostgreSQL's default,
// 64 MB, holds a bulk statement's first 200,000 rows or so back and sends
// them in bursts of that size, the last one at the commit: the destination
// then starts late and has up to 64 MB of changes left to write after the
// source's commit. At 8 MB a streamed transaction reaches pgmirror, and is
// written early (engine/cdc), in pieces an eighth of that size, from its
// first 8 MB on, and the walsender holds less memory. Transactions below it
// still come whole at their commit.
const streamingWorkMemKB = 8 << 10

// lowerDecodingWorkMem lowers the walsender's logical_decoding_work_mem to
// streamingWorkMemKB for this connection when it is higher: a lower value
// (a server or database that streams sooner) is kept. A replication
// connection takes simple-protocol SQL only, so the value is a literal.
func lowerDecodingWorkMem(ctx context.Context, conn *pgconn.PgConn) error {
	sql := fmt.Sprintf(`SELECT pg_catalog.set_config('logical_decoding_work_mem',
		(LEAST(pg_catalog.pg_size_bytes(pg_catalog.current_setting('logical_decoding_work_mem')) / 1024, %d))::text || 'kB', false)`,
		streamingWorkMemKB)
	if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("set logical_decoding_work_mem: %w", err)
	}
	return nil
}
