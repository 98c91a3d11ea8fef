// Package seqsync keeps the destination's sequences in step with the
// source's. Logical replication carries rows, not sequences: without this a
// destination that takes writes after a switch-over would hand out ids its
// tables already hold.
//
// For every mirrored table, the sequences its columns own on the source
// (serial columns' OWNED BY sequences and identity columns' sequences) are
// paired with the sequence the same destination column owns
// (pg_get_serial_sequence on the destination, so a renamed or schema-mapped
// table needs no name rules). Sync sets each destination sequence to the
// source's value (setval with its last_value and is_called) when the source
// is ahead, and never moves a destination sequence backwards: values handed
// out on the destination (a test insert, writes after a switch) stay
// reserved.
package seqsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Pair is one sequence kept in step: the source sequence owned by Column of
// a mapped table, and the sequence the same column owns on the destination
// (or, from PlanListed, a listed sequence and its namesake: no Table or
// Column).
type Pair struct {
	Table        change.Mapping
	Column       string
	Source, Dest change.TableName
}

// Plan pairs the source sequences owned by the mapped tables' replicated
// columns with the destination's sequences of the same columns. A column
// whose destination owns no sequence (a destination table created by hand
// without its default, or a column not replicated) is left out with a
// warning that says so.
func Plan(ctx context.Context, src, dst schemasync.Conn, mappings []change.Mapping) (pairs []Pair, warnings []string, err error) {
	for _, m := range mappings {
		table, err := schemasync.Describe(ctx, src, m.Source)
		if err != nil {
			return nil, nil, fmt.Errorf("sequences of %s: %w", m.Source, err)
		}
		for _, c := range table.Columns {
			if c.Sequence == nil || m.Excluded(c.Name) {
				continue
			}
			var schema, name *string
			err := dst.QueryRow(ctx, `SELECT n.nspname, c.relname
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = pg_catalog.pg_get_serial_sequence($1, $2)::pg_catalog.regclass`,
				m.Destination.Quoted(), c.Name).Scan(&schema, &name)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return nil, nil, fmt.Errorf("sequence of %s.%s on the destination: %w", m.Destination, sqlquote.Ident(c.Name), err)
			}
			if schema == nil || name == nil {
				warnings = append(warnings, fmt.Sprintf("column %s of %s owns no sequence on the destination: its source sequence %s.%s is not kept in step",
					sqlquote.Ident(c.Name), m.Destination, sqlquote.Ident(c.Sequence.Schema), sqlquote.Ident(c.Sequence.Name)))
				continue
			}
			pairs = append(pairs, Pair{Table: m, Column: c.Name,
				Source: change.TableName{Schema: c.Sequence.Schema, Name: c.Sequence.Name},
				Dest:   change.TableName{Schema: *schema, Name: *name}})
		}
	}
	return pairs, warnings, nil
}

// PlanListed pairs sequences named in a mirror's configuration (sequences
// no mapped column owns, for example one that several tables draw ids
// from through DEFAULT nextval(...)) with the sequence of the same name on
// the destination, and creates that sequence, with the source's type and
// options, when it is missing. It returns the pairs and the statements
// executed.
func PlanListed(ctx context.Context, src, dst schemasync.Conn, names []change.TableName) (pairs []Pair, ddl []string, err error) {
	for _, name := range names {
		def, err := schemasync.DescribeSequence(ctx, src, name)
		if err != nil {
			return nil, ddl, fmt.Errorf("source: %w", err)
		}
		created, err := schemasync.CreateSequence(ctx, dst, name, def)
		ddl = append(ddl, created...)
		if err != nil {
			return nil, ddl, fmt.Errorf("destination: %w", err)
		}
		pairs = append(pairs, Pair{Source: name, Dest: name})
	}
	return pairs, ddl, nil
}

// state is a sequence's last_value and is_called.
type state struct {
	last     int64
	called   bool
	increase bool // its increment is positive
}

// next is the value nextval would return (ignoring the maximum and cycling).
func (s state) next(increment int64) int64 {
	if s.called {
		return s.last + increment
	}
	return s.last
}

func readState(ctx context.Context, conn schemasync.Conn, seq change.TableName) (state, int64, error) {
	var st state
	var increment int64
	err := conn.QueryRow(ctx, `SELECT s.last_value, s.is_called, p.seqincrement
FROM `+seq.Quoted()+` s, pg_catalog.pg_sequence p WHERE p.seqrelid = $1::pg_catalog.regclass`, seq.Quoted()).
		Scan(&st.last, &st.called, &increment)
	if err != nil {
		return state{}, 0, err
	}
	st.increase = increment > 0
	return st, increment, nil
}

// Result is what a Sync did.
type Result struct {
	// Moved lists the destination sequences that were set forward.
	Moved []change.TableName
	// Checked counts the pairs compared.
	Checked int
}

// Sync sets every pair's destination sequence to its source sequence's
// value where the source is ahead (for a descending sequence: below), and
// leaves it alone otherwise. Reading a source sequence needs SELECT (or
// USAGE) on it; setting a destination sequence needs UPDATE on it.
func Sync(ctx context.Context, src, dst schemasync.Conn, pairs []Pair) (Result, error) {
	var res Result
	for _, p := range pairs {
		s, inc, err := readState(ctx, src, p.Source)
		if err != nil {
			return res, fmt.Errorf("read source sequence %s (the peer user needs SELECT on it): %w", p.Source, err)
		}
		d, dinc, err := readState(ctx, dst, p.Dest)
		if err != nil {
			return res, fmt.Errorf("read destination sequence %s: %w", p.Dest, err)
		}
		res.Checked++
		srcNext, dstNext := s.next(inc), d.next(dinc)
		ahead := srcNext > dstNext
		if !s.increase {
			ahead = srcNext < dstNext
		}
		if !ahead {
			continue
		}
		if _, err := dst.Exec(ctx, `SELECT pg_catalog.setval($1::pg_catalog.regclass, $2, $3)`, p.Dest.Quoted(), s.last, s.called); err != nil {
			return res, fmt.Errorf("set destination sequence %s to %d: %w", p.Dest, s.last, err)
		}
		res.Moved = append(res.Moved, p.Dest)
	}
	return res, nil
}
