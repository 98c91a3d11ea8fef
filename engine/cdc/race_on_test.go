//go:build race

package cdc_test

// raceDetector is true when the tests run under the race detector, which
// slows them down several times and grows the heap: the tests that measure
// memory over millions of rows run without it (make test runs the package
// both ways).
const raceDetector = true
