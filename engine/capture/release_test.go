package capture

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

// TestReleaseWakesTheReaderOnceAQuarterIsFree: a reader that waits for
// memory goes on only once a quarter of MaxBufferedBytes is free again, not
// at the first release (which let it read one change and wait again,
// behind a slow destination, for every change).
func TestReleaseWakesTheReaderOnceAQuarterIsFree(t *testing.T) {
	ev := Event{Change: &change.Change{Op: change.OpInsert, New: []change.Value{{Kind: change.ValueText, Text: []byte("a value")}}}}
	size := ev.Change.Size()
	s := &Stream{
		log: slog.New(slog.DiscardHandler), events: make(chan []Event, 1<<10), space: make(chan struct{}, 1),
		cfg:        StreamConfig{MaxBufferedBytes: 8 * size, StatusInterval: time.Hour},
		lastStatus: time.Now(), statusInterval: time.Hour,
	}
	ticker := time.NewTicker(time.Hour)
	defer ticker.Stop()
	ctx := context.Background()
	for range 8 {
		require.NoError(t, s.emit(ctx, ticker, ev))
	}
	ninth := make(chan error, 1)
	go func() { ninth <- s.emit(ctx, ticker, ev) }()
	var handed []Event
	for len(handed) < 8 {
		handed = append(handed, <-s.events...) // handed over before it waits
	}
	waiting := func() bool {
		select {
		case err := <-ninth:
			require.NoError(t, err)
			return false
		case <-time.After(100 * time.Millisecond):
			return true
		}
	}
	require.True(t, waiting(), "the ninth change waits for memory")
	s.Release(handed[0])
	require.True(t, waiting(), "one change released of eight: the reader still waits")
	s.Release(handed[1])
	require.False(t, waiting(), "a quarter released: the reader goes on")
	require.Equal(t, int64(7*size), s.buffered.Load())
}
