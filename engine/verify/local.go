package verify

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgmirror/pgmirror/engine/change"
)

// ErrHoldTimeout: the run gave up waiting for the verification (or the
// verification for the run) within the bound.
var ErrHoldTimeout = errors.New("the mirror's hold timed out")

// Local is a hold shared in memory between a CDC run (cdc.Holder) and a
// verification (HoldControl) in one process. The run waits at most Wait for
// the exact position and at most Wait again to be released.
type Local struct {
	// Wait bounds each of the run's waits. Default 3 s.
	Wait time.Duration

	mu      sync.Mutex
	floor   change.LSN
	at      change.LSN
	applied change.LSN
	state   int // 0 idle, 1 armed, 2 held, 3 released, 4 expired
	changed chan struct{}
}

func (l *Local) wait() time.Duration {
	if l.Wait > 0 {
		return l.Wait
	}
	return 3 * time.Second
}

// signal wakes every waiter; call with mu held.
func (l *Local) signal() {
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// waitFor waits until cond holds (checked with mu held) or d passes.
func (l *Local) waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		if cond() {
			l.mu.Unlock()
			return true
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// HoldFloor implements cdc.Holder.
func (l *Local) HoldFloor() change.LSN {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != 1 {
		return 0
	}
	if l.at != 0 {
		return l.at
	}
	return l.floor
}

// Hold implements cdc.Holder.
func (l *Local) Hold(ctx context.Context, next, applied change.LSN) {
	if !l.waitFor(ctx, l.wait(), func() bool { return l.state != 1 || l.at != 0 }) {
		l.expire()
		return
	}
	l.mu.Lock()
	if l.state != 1 || next < l.at {
		l.mu.Unlock()
		return
	}
	l.state, l.applied = 2, applied
	l.signal()
	l.mu.Unlock()
	if !l.waitFor(ctx, l.wait(), func() bool { return l.state != 2 }) {
		l.expire()
	}
}

func (l *Local) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == 1 || l.state == 2 {
		l.state = 4
		l.signal()
	}
}

// Arm implements HoldControl.
func (l *Local) Arm(ctx context.Context, floor change.LSN) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.floor, l.at, l.applied, l.state = floor, 0, 0, 1
	l.signal()
	return nil
}

// HoldAt implements HoldControl.
func (l *Local) HoldAt(ctx context.Context, at change.LSN) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != 1 {
		return ErrHoldTimeout
	}
	l.at = at
	l.signal()
	return nil
}

// WaitHeld implements HoldControl.
func (l *Local) WaitHeld(ctx context.Context) (change.LSN, error) {
	ok := l.waitFor(ctx, 30*time.Second, func() bool { return l.state >= 2 })
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if l.state != 2 {
		return 0, ErrHoldTimeout
	}
	return l.applied, nil
}

// Release implements HoldControl.
func (l *Local) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != 0 {
		l.state = 3
		l.signal()
	}
	return nil
}
