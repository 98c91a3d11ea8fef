//go:build !linux

package main

// scheduleBatch does nothing where SCHED_BATCH does not exist.
func scheduleBatch() (bool, error) { return false, nil }
