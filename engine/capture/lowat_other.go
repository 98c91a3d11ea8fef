//go:build !linux

package capture

// lowWaterMark is nil outside Linux: other systems wake a socket's waiters
// on any data whatever its low-water mark, or treat it differently.
func lowWaterMark(any) func(bytes int) { return nil }
