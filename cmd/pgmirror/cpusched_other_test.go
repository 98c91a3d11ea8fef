//go:build !linux

package main

import "testing"

// checkEmbeddedPolicy has nothing to check where SCHED_BATCH does not exist.
func checkEmbeddedPolicy(*testing.T, *embedded, *service) {}
