// Package migrations holds the catalog schema as numbered goose SQL files,
// embedded in the binary. Files are append-only: change the schema with a new
// file, never by editing one that has shipped.
package migrations

import "embed"

// FS holds the migration files at its root.
//
//go:embed *.sql
var FS embed.FS
