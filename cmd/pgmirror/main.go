// Command pgmirror runs the pgmirror service: the REST API and the River
// workers that replicate PostgreSQL databases.
//
//	pgmirror serve       run the API and the workers (the default)
//	pgmirror migrate     apply the catalog migrations and exit
//	pgmirror rotate-key  re-encrypt the catalog's secrets with the current key
//	pgmirror gen-key     print a new catalog encryption key
//	pgmirror version     print the version and exit
//	pgmirror login|logout|peers|mirrors|logs
//	                     client commands that talk to a running service (docs/cli.md)
//
// Configuration comes from the environment; see docs/configuration.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The collector's pace is the process's, so it is set here and not in
	// run, which tests call in their own process.
	untune := tuneGC(os.Getenv)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	untune()
	stop()
	if err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "pgmirror:", msg)
		}
		os.Exit(exitCode(err))
	}
}
