package db

import (
	"context"
	"fmt"

	"github.com/pgmirror/pgmirror/db/dbident"
)

// Identity says which database of which PostgreSQL server the catalog is,
// to recognise a peer that points at the catalog itself.
func (s *Store) Identity(ctx context.Context) (dbident.Identity, error) {
	id, err := dbident.Of(ctx, s.pool)
	if err != nil {
		return dbident.Identity{}, fmt.Errorf("catalog: %w", err)
	}
	return id, nil
}
