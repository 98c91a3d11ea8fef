package schemasync

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// ErrSequenceNotFound: no sequence of that name.
var ErrSequenceNotFound = errors.New("sequence not found")

// DescribeSequence reads the definition of the sequence name (a sequence
// that no column needs to own). It returns an error matching
// ErrSequenceNotFound when there is no such sequence.
func DescribeSequence(ctx context.Context, conn Conn, name change.TableName) (Sequence, error) {
	s := Sequence{Schema: name.Schema, Name: name.Name}
	err := conn.QueryRow(ctx, `SELECT pg_catalog.format_type(q.seqtypid, NULL), q.seqstart, q.seqincrement, q.seqmin, q.seqmax, q.seqcache, q.seqcycle
FROM pg_catalog.pg_sequence q
JOIN pg_catalog.pg_class c ON c.oid = q.seqrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, name.Schema, name.Name).Scan(&s.Type, &s.Start, &s.Increment, &s.Min, &s.Max, &s.Cache, &s.Cycle)
	if errors.Is(err, pgx.ErrNoRows) {
		return Sequence{}, fmt.Errorf("sequence %s: %w", name, ErrSequenceNotFound)
	}
	if err != nil {
		return Sequence{}, fmt.Errorf("describe sequence %s: %w", name, err)
	}
	return s, nil
}

// CreateSequence creates the sequence name with s's type and options on
// conn, and its schema when missing, unless a relation of that name exists.
// It returns the statements executed (none when it existed).
func CreateSequence(ctx context.Context, conn Conn, name change.TableName, s Sequence) ([]string, error) {
	if _, err := DescribeSequence(ctx, conn, name); err == nil {
		return nil, nil
	} else if !errors.Is(err, ErrSequenceNotFound) {
		return nil, err
	}
	stmts := []string{
		"CREATE SCHEMA IF NOT EXISTS " + sqlquote.Ident(name.Schema),
		fmt.Sprintf("CREATE SEQUENCE IF NOT EXISTS %s AS %s %s", name.Quoted(), s.Type, sequenceOptions(&s)),
	}
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, fmt.Errorf("create sequence %s: %w", name, err)
		}
	}
	return stmts, nil
}
