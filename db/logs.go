package db

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// LogLevel is the level of a mirror log entry (mirror_logs.level).
type LogLevel string

// Log levels of mirror log entries.
const (
	LevelInfo  LogLevel = "INFO"
	LevelWarn  LogLevel = "WARN"
	LevelError LogLevel = "ERROR"
	LevelDebug LogLevel = "DEBUG"
)

// The spec's log message catalogue. Log entries use these texts exactly so
// that users can search for them.
const (
	MsgSnapshotStarting       = "Starting initial snapshot"
	MsgTableSnapshotCompleted = "Table snapshot completed"
	MsgSnapshotCompleted      = "Initial snapshot completed"
	MsgSnapshotFailed         = "Snapshot failed"
	MsgCDCBatchFetched        = "CDC batch fetched from source"
	MsgCDCBatchApplied        = "CDC batch applied successfully"
	MsgCDCNoChanges           = "No changes in CDC batch"
	MsgCDCBatchFailed         = "Failed to apply CDC batch"
	MsgMirrorPaused           = "Mirror paused"
	MsgMirrorResumed          = "Mirror resumed"
	MsgSchemaSyncInitiated    = "Schema sync initiated"
	MsgTableResyncStarted     = "Table resync started"
	MsgRetrySignal            = "Retry signal received"
	MsgSlotExists             = "Replication slot already exists"
	MsgConnectionTimeout      = "Connection timeout"
	MsgHeartbeatTimeout       = "Heartbeat timeout"
	MsgForeignKeyViolation    = "Foreign key violation"
	// MsgSchemaChangeApplied: a source column change applied to the
	// destination at its position in the stream (details: table,
	// statement).
	MsgSchemaChangeApplied = "Schema change applied"
	// MsgSchemaChangeNotApplied: a source column change left alone under
	// schema_changes warn.
	MsgSchemaChangeNotApplied = "Schema change not applied"
	// MsgPausedForSchemaChange: the mirror paused itself before a source
	// column change under schema_changes stop.
	MsgPausedForSchemaChange = "Mirror paused before a schema change"
)

// CDCBatchDetails is the details object of CDC batch log entries.
type CDCBatchDetails struct {
	BatchID        int64    `json:"batch_id"`
	RowsProcessed  int64    `json:"rows_processed"`
	RowsInserted   int64    `json:"rows_inserted"`
	RowsUpdated    int64    `json:"rows_updated"`
	RowsDeleted    int64    `json:"rows_deleted"`
	DurationMS     int64    `json:"duration_ms"`
	LSN            string   `json:"lsn,omitempty"`
	TablesAffected []string `json:"tables_affected,omitempty"`
	// StreamedTransactions counts the large source transactions among
	// these batches that were applied while the source streamed them (each
	// a batch of its own, its duration counted from its first change).
	StreamedTransactions int64 `json:"streamed_transactions,omitempty"`
}

// SnapshotDetails is the details object of snapshot log entries.
type SnapshotDetails struct {
	Table           string  `json:"table,omitempty"`
	RowsSnapshotted int64   `json:"rows_snapshotted,omitempty"`
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	Partition       int     `json:"partition,omitempty"`
	TotalPartitions int     `json:"total_partitions,omitempty"`
	// RowsCopied is, in partition entries, the rows of the table copied
	// so far (this partition included): how far along its copy is.
	RowsCopied int64 `json:"rows_copied,omitempty"`
	// RowsEstimated and PercentDone say, in partition entries, how many
	// rows the source estimated for the table and how far along its copy
	// is (see PercentDone); absent when the estimate is unknown.
	RowsEstimated *int64   `json:"rows_estimated,omitempty"`
	PercentDone   *float64 `json:"percent_done,omitempty"`
}

// PercentDone is how far along a table's copy is, in percent (one
// decimal), from the rows copied and the source's estimate: at most 99 while
// it runs (the estimate may be low); the "Table snapshot completed" entry
// says 100.
func PercentDone(copied, estimated int64) *float64 {
	p := 0.0
	if estimated > 0 {
		p = min(99, 100*float64(copied)/float64(estimated))
	}
	p = float64(int(p*10)) / 10
	return &p
}

// ErrorDetails is the details object of error log entries.
type ErrorDetails struct {
	Error       string     `json:"error"`
	RetryCount  int        `json:"retry_count"`
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	Operation   string     `json:"operation,omitempty"`
}

// SchemaSyncDetails is the details object of schema sync log entries.
type SchemaSyncDetails struct {
	Tables        []string `json:"tables"`
	DDLStatements []string `json:"ddl_statements"`
	DurationMS    int64    `json:"duration_ms"`
}

// LogInsert appends a log entry to a mirror's log. details is marshalled to
// JSON; nil gives {}.
func (s *Store) LogInsert(ctx context.Context, mirrorID int64, level LogLevel, message string, details any) error {
	return logInsert(ctx, s.q, mirrorID, time.Time{}, level, message, details)
}

// LogInsertAt is LogInsert for an entry that happened at at (written late,
// for example after a catalog outage); a zero at means now.
func (s *Store) LogInsertAt(ctx context.Context, mirrorID int64, at time.Time, level LogLevel, message string, details any) error {
	return logInsert(ctx, s.q, mirrorID, at, level, message, details)
}

func logInsert(ctx context.Context, q Executor, mirrorID int64, at time.Time, level LogLevel, message string, details any) error {
	raw := []byte("{}")
	if details != nil {
		b, err := json.Marshal(details)
		if err != nil {
			return fmt.Errorf("insert log for mirror %d: marshal details: %w", mirrorID, err)
		}
		if string(b) != "null" {
			raw = b
		}
	}
	var id int64
	var created *time.Time
	if !at.IsZero() {
		created = &at
	}
	err := q.QueryRow(ctx, `INSERT INTO mirror_logs (mirror_id, level, message, details, created_at)
		VALUES ($1, $2, $3, $4::jsonb, coalesce($5::timestamptz, now())) RETURNING id`,
		mirrorID, level, message, string(raw), created).Scan(&id)
	if err != nil {
		return fmt.Errorf("insert log for mirror %d: %w", mirrorID, translate(err))
	}
	return nil
}

// LogQuery filters a mirror's log. Zero values mean no filter; Limit must be
// set by the caller. Search matches, case-insensitively and literally (no
// wildcards), a substring of the message or of any value in details; key
// names in details are not searched.
type LogQuery struct {
	MirrorID int64
	Level    LogLevel
	Search   string
	Limit    int
	Offset   int
}

// LogList returns a page of a mirror's log entries newest first, and the
// number of entries matching the filter.
func (s *Store) LogList(ctx context.Context, q LogQuery) ([]LogEntry, int64, error) {
	where := `mirror_id = $1`
	args := []any{q.MirrorID}
	if q.Level != "" {
		args = append(args, q.Level)
		where += fmt.Sprintf(` AND level = $%d`, len(args))
	}
	if q.Search != "" {
		// Search the message and every scalar value in details (at any
		// depth, array elements included) as plain text. Not details::text:
		// that is JSON, where a quote in a value reads \" and so a search for
		// `relation "x"` copied from an error would not match, and where
		// every key name would match too.
		args = append(args, "%"+escapeLike(q.Search)+"%")
		where += fmt.Sprintf(` AND (message ILIKE $%[1]d OR EXISTS (
			SELECT 1 FROM jsonb_path_query(details, 'strict $.**') AS v
			WHERE jsonb_typeof(v) IN ('string', 'number', 'boolean') AND v #>> '{}' ILIKE $%[1]d))`, len(args))
	}
	var total int64
	if err := s.q.QueryRow(ctx, `SELECT count(*) FROM mirror_logs WHERE `+where, args...).Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count logs of mirror %d: %w", q.MirrorID, err)
	}
	args = append(args, q.Limit, q.Offset)
	rows, err := s.q.Query(ctx, fmt.Sprintf(`SELECT id, level, message, details::text, created_at FROM mirror_logs WHERE %s ORDER BY id DESC LIMIT $%d OFFSET $%d`,
		where, len(args)-1, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("list logs of mirror %d: %w", q.MirrorID, err)
	}
	defer rows.Close()
	out := []LogEntry{}
	for rows.Next() {
		var e LogEntry
		var details string
		if err := rows.Scan(&e.ID, &e.Level, &e.Message, &details, &e.CreatedAt); err != nil {
			return nil, 0, fmt.Errorf("list logs of mirror %d: %w", q.MirrorID, err)
		}
		e.Details = json.RawMessage(details)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("list logs of mirror %d: %w", q.MirrorID, err)
	}
	return out, total, nil
}

// escapeLike escapes the LIKE wildcards % and _ (and the escape character)
// so that a search matches them literally.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// LogPrune deletes log entries created before olderThan and returns how
// many it deleted.
func (s *Store) LogPrune(ctx context.Context, olderThan time.Time) (int64, error) {
	tag, err := s.q.Exec(ctx, `DELETE FROM mirror_logs WHERE created_at < $1`, olderThan)
	if err != nil {
		return 0, fmt.Errorf("prune logs older than %s: %w", olderThan.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
