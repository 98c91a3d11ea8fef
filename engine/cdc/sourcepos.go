package cdc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// sourcePollEvery is how often the run reads the source's WAL position.
const sourcePollEvery = 100 * time.Millisecond

// sourcePosition follows the end of the source's WAL on a plain source
// connection, to tell a catch-up from a live stream. The replication stream
// itself cannot say: a logical walsender sends, as "WAL end" of a message,
// the position of that message (walsender.c, WalSndPrepareWrite), and in
// keepalives the position it has decoded up to, never the server's WAL end.
type sourcePosition struct {
	end     atomic.Uint64
	conn    *pgx.Conn
	stopped chan struct{}
	wg      sync.WaitGroup
}

// watchSourcePosition polls conn every sourcePollEvery until stop; conn is
// closed then. A failed poll ends the polling quietly (the replication
// stream notices a lost source by itself); End then stays where it was.
func watchSourcePosition(ctx context.Context, conn *pgx.Conn) *sourcePosition {
	p := &sourcePosition{conn: conn, stopped: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(sourcePollEvery)
		defer tick.Stop()
		for {
			if err := p.poll(ctx); err != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-p.stopped:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *sourcePosition) poll(ctx context.Context) error {
	pollCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var text string
	if err := p.conn.QueryRow(pollCtx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
		ELSE pg_current_wal_flush_lsn() END)::text`).Scan(&text); err != nil {
		return err
	}
	lsn, err := change.ParseLSN(text)
	if err != nil {
		return err
	}
	p.end.Store(uint64(lsn))
	return nil
}

// End is the source's WAL end at the last poll (0 before the first).
func (p *sourcePosition) End() change.LSN { return change.LSN(p.end.Load()) }

// behind says how many bytes of source WAL lie past lsn, as far as known.
func (p *sourcePosition) behind(lsn change.LSN) uint64 {
	if end := p.End(); end > lsn {
		return uint64(end - lsn)
	}
	return 0
}

// stop ends the polling and closes the connection.
func (p *sourcePosition) stop() {
	close(p.stopped)
	p.wg.Wait()
	closeQuietly(p.conn)
}
