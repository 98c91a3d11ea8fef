package jobs

import (
	"context"
	"sync"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/verify"
)

// holdWait bounds each wait of a CDC run held for a verification: for the
// exact position, then to be released. A verification that takes longer
// fails its attempt; the mirror goes on.
const holdWait = 3 * time.Second

// holdPoll is how often a held run or a waiting verification reads the hold
// from the catalog.
const holdPoll = 5 * time.Millisecond

// runHold is a mirror run's side of a verification's hold (cdc.Holder),
// through the verifications table. The control watcher (checkControl)
// arms it when a verification requests a hold; the CDC loop reads it
// without blocking, and Hold talks to the catalog only while the run waits.
type runHold struct {
	store    holdStore
	mirrorID int64

	mu    sync.Mutex
	id    int64 // the verification armed, 0 when none
	floor change.LSN
	at    change.LSN
	ended map[int64]bool // verifications whose hold is over
}

// refresh reads the mirror's hold requests: a new request is armed (and the
// catalog told), a known position is taken in.
func (h *runHold) refresh(ctx context.Context) {
	v, ok, err := h.store.VerificationHoldRequest(ctx, h.mirrorID)
	if err != nil || !ok {
		return
	}
	h.mu.Lock()
	if v.HoldState == db.HoldRequested {
		delete(h.ended, v.ID) // a new request of the same verification (a repair's second hold)
	}
	if h.ended[v.ID] {
		h.mu.Unlock()
		return
	}
	floor, _ := change.ParseLSN(v.HoldFloor)
	at, _ := change.ParseLSN(v.HoldLSN)
	h.id, h.floor = v.ID, floor
	if at != 0 {
		h.at = at
	}
	h.mu.Unlock()
	if v.HoldState == db.HoldRequested {
		_, _ = h.store.VerificationSetHold(ctx, v.ID, []db.HoldState{db.HoldRequested}, db.HoldArmed, "", "", "")
	}
}

// HoldFloor implements cdc.Holder.
func (h *runHold) HoldFloor() change.LSN {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.id == 0 {
		return 0
	}
	if h.at != 0 {
		return h.at
	}
	return h.floor
}

func (h *runHold) end(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended == nil {
		h.ended = map[int64]bool{}
	}
	h.ended[id] = true
	if h.id == id {
		h.id, h.floor, h.at = 0, 0, 0
	}
}

// expire gives the hold up: the verification's attempt fails, CDC goes on.
func (h *runHold) expire(id int64, from db.HoldState) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = h.store.VerificationSetHold(ctx, id, []db.HoldState{from}, db.HoldExpired, "", "", "")
	h.end(id)
}

// read reads the verification with a deadline: the CDC run never waits
// for the catalog longer than its hold allows.
func (h *runHold) read(ctx context.Context, id int64, deadline time.Time) (db.Verification, error) {
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return h.store.VerificationByID(rctx, id)
}

// Hold implements cdc.Holder.
func (h *runHold) Hold(ctx context.Context, next, applied change.LSN) {
	h.mu.Lock()
	id, at := h.id, h.at
	h.mu.Unlock()
	if id == 0 {
		return
	}
	if at == 0 {
		deadline := time.Now().Add(holdWait)
		for at == 0 {
			if time.Now().After(deadline) || ctx.Err() != nil {
				h.expire(id, db.HoldArmed)
				return
			}
			time.Sleep(holdPoll)
			v, err := h.read(ctx, id, deadline)
			if err != nil || v.State != db.VerifyRunning || v.HoldState != db.HoldArmed {
				if err == nil {
					h.end(id)
					return
				}
				continue
			}
			at, _ = change.ParseLSN(v.HoldLSN)
		}
		h.mu.Lock()
		if h.id == id {
			h.at = at
		}
		h.mu.Unlock()
	}
	if next < at {
		return // committed before the position: apply it
	}
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	ok, err := h.store.VerificationSetHold(wctx, id, []db.HoldState{db.HoldArmed}, db.HoldHeld, "", "", applied.String())
	cancel()
	if err != nil || !ok {
		h.end(id)
		return
	}
	deadline := time.Now().Add(holdWait)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(holdPoll)
		v, err := h.read(ctx, id, deadline)
		if err == nil && (v.State != db.VerifyRunning || v.HoldState != db.HoldHeld) {
			h.end(id)
			return
		}
	}
	h.expire(id, db.HoldHeld)
}

// catalogHold is a verification job's side of the hold (verify.HoldControl).
type catalogHold struct {
	store *db.Store
	id    int64
}

var _ verify.HoldControl = (*catalogHold)(nil)

// armWait bounds how long a verification waits for the mirror's run to take
// its hold request in.
const armWait = 10 * time.Second

func (c *catalogHold) Arm(ctx context.Context, floor change.LSN) error {
	ok, err := c.store.VerificationSetHold(ctx, c.id, []db.HoldState{"", db.HoldExpired, db.HoldReleased}, db.HoldRequested, floor.String(), "", "")
	if err != nil {
		return err
	}
	if !ok {
		return errVerificationEnded
	}
	state, err := c.wait(ctx, armWait, db.HoldRequested)
	if err != nil {
		return err
	}
	if state != db.HoldArmed {
		return &verifyError{msg: "the mirror's CDC run did not take the hold request in within " + armWait.String() +
			": the mirror must be running with its CDC streaming; check GET /v1/mirrors/{name} and try again"}
	}
	return nil
}

func (c *catalogHold) HoldAt(ctx context.Context, at change.LSN) error {
	ok, err := c.store.VerificationSetHold(ctx, c.id, []db.HoldState{db.HoldArmed}, db.HoldArmed, "", at.String(), "")
	if err != nil {
		return err
	}
	if !ok {
		return verify.ErrHoldTimeout
	}
	return nil
}

func (c *catalogHold) WaitHeld(ctx context.Context) (change.LSN, error) {
	state, err := c.wait(ctx, 30*time.Second, db.HoldArmed)
	if err != nil {
		return 0, err
	}
	if state != db.HoldHeld {
		return 0, verify.ErrHoldTimeout
	}
	v, err := c.store.VerificationByID(ctx, c.id)
	if err != nil {
		return 0, err
	}
	return change.ParseLSN(v.HeldApplied)
}

func (c *catalogHold) Release(ctx context.Context) error {
	_, err := c.store.VerificationSetHold(ctx, c.id, []db.HoldState{db.HoldRequested, db.HoldArmed, db.HoldHeld}, db.HoldReleased, "", "", "")
	return err
}

// wait polls the hold until it leaves state from or d passes, and returns
// the state it found.
func (c *catalogHold) wait(ctx context.Context, d time.Duration, from db.HoldState) (db.HoldState, error) {
	deadline := time.Now().Add(d)
	for {
		v, err := c.store.VerificationByID(ctx, c.id)
		if err != nil {
			return "", err
		}
		if v.State != db.VerifyRunning {
			return "", errVerificationEnded
		}
		if v.HoldState != from || time.Now().After(deadline) {
			return v.HoldState, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(holdPoll):
		}
	}
}
