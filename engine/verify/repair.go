package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// TableRepair names the key ranges of one table to copy again.
type TableRepair struct {
	Mapping change.Mapping
	Ranges  RepairRanges
}

// RepairConfig configures Repair.
type RepairConfig struct {
	Source, Dest *pgx.ConnConfig
	MirrorUID    string
	Tables       []TableRepair
	// Budget bounds the time one chunk of a repair writes, so that it holds the
	// mirror's run for at most about that long: it stops after the key range
	// that exceeds it and returns the ranges left for the next call (at a
	// new position). At least one range is repaired per call. Default 1 s.
	Budget time.Duration
	// MarkWrites marks the repair's destination transaction with a copy
	// origin of the mirror (engine/origin.SetupCopy), when the destination
	// user may use origins, so that a mirror reading from the destination
	// leaves the repair out like any other write of pgmirror's.
	MarkWrites bool
}

// ErrRepairMoved: the mirror applied more before the repair could be
// written; nothing was changed.
var ErrRepairMoved = errors.New("the mirror moved on before the repair was written; nothing was changed, try again")

// RepairResult is what a repair (or one chunk of it) did.
type RepairResult struct {
	// Written is the rows written, Ranges the key ranges repaired.
	Written int64
	Ranges  int
	// Rest are the key ranges left for the next call (Budget).
	Rest []TableRepair
	// Chunks is how many chunks RepairChunks wrote.
	Chunks int
}

// repairStatementTimeout bounds each statement of a repair: with Budget it
// bounds how long a repair keeps the mirror's applied position locked.
const repairStatementTimeout = "1s"

// repairSession is the source and destination sessions a repair writes
// through, opened once for every chunk: connecting (and marking the
// destination's writes) is done before the mirror is held, so a chunk holds
// it only for its reads and writes.
type repairSession struct {
	src, dst *pgx.Conn
	origin   string // the destination session's copy origin, "" if unmarked
}

// openRepairSession connects to both peers and marks the destination
// session's writes (cfg.MarkWrites).
func openRepairSession(ctx context.Context, cfg RepairConfig) (_ *repairSession, err error) {
	rs := &repairSession{}
	defer func() {
		if err != nil {
			rs.close()
		}
	}()
	if rs.src, err = session.Connect(ctx, cfg.Source); err != nil {
		return nil, fmt.Errorf("connect to the source: %w", err)
	}
	if rs.dst, err = session.Connect(ctx, cfg.Dest); err != nil {
		return nil, fmt.Errorf("connect to the destination: %w", err)
	}
	if cfg.MarkWrites {
		if rs.origin, err = markRepair(ctx, rs.dst, cfg.MirrorUID); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// close lets the copy origin go and closes both sessions.
func (rs *repairSession) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rs.origin != "" && rs.dst != nil {
		_ = origin.Release(ctx, rs.dst, rs.origin)
	}
	for _, c := range []*pgx.Conn{rs.src, rs.dst} {
		if c != nil {
			_ = c.Close(ctx)
		}
	}
}

// repairChunk copies the source rows of the given key ranges, as of the
// snapshots' position, over the destination's rows of those ranges (delete
// the range, insert the source's rows), in one destination transaction.
// Call it while the mirror is held at that position (SnapshotConfig
// WhileHeld): the transaction first locks the mirror's applied position on
// the destination and checks that it is still the held one, so a CDC batch
// cannot commit in between (it waits for the lock), and the repaired rows
// stand exactly where the rest of the destination stands. Lock waits and
// statements are bounded (lock_timeout, statement_timeout), so a CDC batch
// never deadlocks with a repair: the repair fails instead. It writes for
// about cfg.Budget and returns the ranges it did not reach, to be repaired
// by further calls at new positions: each call is consistent on its own, and
// the run is never held for long. Excluded columns of repaired rows get
// their destination defaults.
func repairChunk(ctx context.Context, cfg RepairConfig, rs *repairSession, s *Snapshots) (RepairResult, error) {
	var res RepairResult
	budget := cmp.Or(cfg.Budget, time.Second)
	started := time.Now()
	srcTx, err := importSnapshot(ctx, rs.src, s.Source)
	if err != nil {
		return res, fmt.Errorf("source: %w", err)
	}
	defer srcTx.Rollback(context.WithoutCancel(ctx))
	tx, err := rs.dst.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("begin the repair: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '1s'; SET LOCAL statement_timeout = '`+repairStatementTimeout+`'`); err != nil {
		return res, err
	}
	// The source's rows are read as text with Settings pinned; they are
	// written back with the same settings.
	if err := pinSettings(ctx, tx, Settings()); err != nil {
		return res, err
	}
	var text string
	err = tx.QueryRow(ctx, `SELECT lsn::pg_catalog.text FROM _pgmirror.applied WHERE mirror_uid OPERATOR(pg_catalog.=) $1::pg_catalog.text FOR UPDATE`, cfg.MirrorUID).Scan(&text)
	if err != nil {
		return res, fmt.Errorf("lock the mirror's applied position: %w", err)
	}
	if lsn, err := change.ParseLSN(text); err != nil || lsn != s.Applied {
		return res, ErrRepairMoved
	}
	for i, tr := range cfg.Tables {
		n, done, err := repairTable(ctx, srcTx, tx, tr, func(done int) bool {
			return res.Ranges+done > 0 && time.Since(started) >= budget
		})
		if err != nil {
			return RepairResult{}, fmt.Errorf("repair %s: %w", tr.Mapping.Source, err)
		}
		res.Written += n
		res.Ranges += done
		if done < len(tr.Ranges.Ranges) {
			rest := tr
			rest.Ranges.Ranges = tr.Ranges.Ranges[done:]
			res.Rest = append([]TableRepair{rest}, cfg.Tables[i+1:]...)
			break
		}
	}
	// The applied position is rewritten unchanged: the row lock is what
	// mattered.
	if _, err := tx.Exec(ctx, `UPDATE _pgmirror.applied SET updated_at = pg_catalog.now() WHERE mirror_uid OPERATOR(pg_catalog.=) $1::pg_catalog.text`, cfg.MirrorUID); err != nil {
		return RepairResult{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return RepairResult{}, fmt.Errorf("commit the repair: %w", err)
	}
	return res, nil
}

// markRepair marks the session of dst with a copy origin of the mirror
// and returns its name, or "" when the destination user may not use
// origins (the repair is then unmarked, like the mirror's other writes).
func markRepair(ctx context.Context, dst *pgx.Conn, mirrorUID string) (string, error) {
	ok, err := origin.Permitted(ctx, dst)
	if err != nil || !ok {
		return "", err
	}
	name, err := origin.SetupCopy(ctx, dst, mirrorUID)
	if errors.Is(err, origin.ErrNoFreeState) {
		return "", nil // unmarked, as when origins are not permitted
	}
	if err != nil {
		return "", fmt.Errorf("mark the repair's writes: %w", err)
	}
	return name, nil
}

// repairTable repairs the key ranges of tr in order until stop says so
// (asked before each range with the ranges done so far) and returns the
// rows written and the ranges repaired.
func repairTable(ctx context.Context, srcTx, dstTx pgx.Tx, tr TableRepair, stop func(done int) bool) (written int64, done int, err error) {
	desc, err := schemasync.Describe(ctx, srcTx, tr.Mapping.Source)
	if err != nil {
		return 0, 0, err
	}
	cols := desc.Replicated(tr.Mapping)
	names := make([]string, len(cols))
	texts := make([]string, len(cols))
	ph := make([]string, len(cols))
	for i, c := range cols {
		names[i] = sqlquote.Ident(c.Name)
		texts[i] = "(" + names[i] + ")::pg_catalog.text"
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	t := &table{names: tr.Ranges.KeyColumns, types: tr.Ranges.KeyTypes}
	for _, k := range tr.Ranges.KeyColumns {
		expr := sqlquote.Ident(k)
		if tr.Ranges.Collate {
			c, _ := desc.Column(k)
			var collatable bool
			if err := srcTx.QueryRow(ctx, `SELECT typcollation OPERATOR(pg_catalog.<>) 0 FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid`, c.TypeOID).Scan(&collatable); err != nil {
				return 0, 0, err
			}
			if collatable {
				expr += ` COLLATE "C"`
			}
		}
		t.keys = append(t.keys, expr)
	}
	insert := fmt.Sprintf(`INSERT INTO %s (%s) OVERRIDING SYSTEM VALUE VALUES (%s)`, tr.Mapping.Destination.Quoted(),
		strings.Join(names, ", "), strings.Join(ph, ", "))
	for _, r := range tr.Ranges.Ranges {
		if stop(done) {
			break
		}
		where, args := t.where(r.Lo, r.Hi)
		rows, err := srcTx.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s`, strings.Join(texts, ", "), tr.Mapping.Source.Quoted(), where), args...)
		if err != nil {
			return 0, 0, fmt.Errorf("read source rows: %w", err)
		}
		values, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([]any, error) {
			vals := make([]*string, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := row.Scan(ptrs...); err != nil {
				return nil, err
			}
			out := make([]any, len(vals))
			for i, v := range vals {
				if v != nil {
					out[i] = *v
				}
			}
			return out, nil
		})
		if err != nil {
			return 0, 0, fmt.Errorf("read source rows: %w", err)
		}
		if _, err := dstTx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE %s`, tr.Mapping.Destination.Quoted(), where), args...); err != nil {
			return 0, 0, fmt.Errorf("delete destination rows: %w", err)
		}
		batch := &pgx.Batch{}
		for _, v := range values {
			batch.Queue(insert, v...)
		}
		if err := dstTx.SendBatch(ctx, batch).Close(); err != nil {
			return 0, 0, fmt.Errorf("insert source rows: %w", err)
		}
		written += int64(len(values))
		done++
	}
	return written, done, nil
}

// repairChunkRetries is how many times in a row RepairChunks tries a chunk
// again after its peer did not answer.
const repairChunkRetries = 3

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Opener obtains snapshots at a new position and runs whileHeld while the
// mirror is held there (OpenSnapshots with SnapshotConfig.WhileHeld); chunk
// numbers the calls from 0, for unique slot names.
type Opener func(ctx context.Context, chunk int, whileHeld func(ctx context.Context, s *Snapshots) error) (*Snapshots, error)

// RepairChunks repairs every range of cfg.Tables by writing chunks at new
// positions until none is left: each chunk writes for about cfg.Budget
// while the mirror is held, and the mirror runs freely between chunks. It
// returns the totals (Rest empty) and the position of the last chunk.
func RepairChunks(ctx context.Context, cfg RepairConfig, open Opener) (RepairResult, change.LSN, error) {
	var total RepairResult
	var at change.LSN
	var rs *repairSession
	defer func() {
		if rs != nil {
			rs.close()
		}
	}()
	calls, failures := 0, 0
	for len(cfg.Tables) > 0 {
		var res RepairResult
		var err error
		if rs == nil {
			rs, err = openRepairSession(ctx, cfg)
		}
		var snaps *Snapshots
		if err == nil {
			snaps, err = open(ctx, calls, func(ctx context.Context, s *Snapshots) error {
				var err error
				res, err = repairChunk(ctx, cfg, rs, s)
				return err
			})
			calls++
		}
		if err != nil && session.Classify(err) == session.Unreachable && failures < repairChunkRetries && ctx.Err() == nil {
			// A peer that did not answer in time (a connection attempt
			// of a loaded server, a reset): the chunk's transaction did
			// not commit, or committed ranges a retry writes again as
			// they are. The chunk is tried again on new sessions, after
			// a pause.
			failures++
			if rs != nil {
				rs.close()
				rs = nil
			}
			if serr := sleepCtx(ctx, time.Duration(failures)*time.Second); serr != nil {
				return total, at, err
			}
			continue
		}
		if err != nil {
			return total, at, err
		}
		failures = 0
		at = snaps.LSN
		snaps.Close()
		total.Written += res.Written
		total.Ranges += res.Ranges
		total.Chunks++
		cfg.Tables = res.Rest
	}
	return total, at, nil
}
