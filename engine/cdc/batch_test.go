package cdc

import (
	"testing"
	"time"
)

func TestCloseBatch(t *testing.T) {
	t.Parallel()
	cfg := Config{BatchSize: 100, SyncInterval: time.Second}
	for _, tc := range []struct {
		name    string
		changes int64
		age     time.Duration
		dry     bool
		behind  uint64
		now     bool
		wait    time.Duration
	}{
		{name: "full batch", changes: 100, age: 0, now: true},
		{name: "full batch while more waits", changes: 150, dry: false, now: true},
		{name: "sync interval passed", changes: 1, age: time.Second, now: true},
		{name: "more transactions waiting", changes: 1, age: time.Millisecond},
		{name: "caught up: commit at once", changes: 1, dry: true, now: true},
		{name: "source has more WAL: gather", changes: 1, age: 500 * time.Microsecond, dry: true, behind: 300, wait: gatherWindow - 500*time.Microsecond},
		{name: "gathered long enough", changes: 5, age: gatherWindow, dry: true, behind: 300, now: true},
		{name: "catching up: gather longer", changes: 5, age: gatherWindow, dry: true, behind: catchUpBehind, wait: catchUpWindow - gatherWindow},
		{name: "catching up: gathered long enough", changes: 5, age: catchUpWindow, dry: true, behind: 50 << 20, now: true},
		{name: "catching up: full batch", changes: 100, age: time.Millisecond, dry: true, behind: 50 << 20, now: true},
	} {
		now, wait := cfg.closeBatch(tc.changes, tc.age, tc.dry, tc.behind)
		if now != tc.now || wait != tc.wait {
			t.Errorf("%s: closeBatch = %v, %s; want %v, %s", tc.name, now, wait, tc.now, tc.wait)
		}
	}
}
