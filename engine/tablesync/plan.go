package tablesync

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/schemasync"
)

// defaultRowsPerPage is the density assumed for a table whose statistics and
// sample say nothing.
const defaultRowsPerPage = 100

// samplePages is how many leading pages are counted when a table has never
// been analyzed.
const samplePages = 16

// tableJob is one mapping to copy.
type tableJob struct {
	m       change.Mapping
	columns []string // replicated columns, in source attnum order
	binary  bool
	parts   []partition
}

// partition is one slice of one leaf relation: the rows whose ctid lies in
// blocks [from, to), or from block from to the end when open.
type partition struct {
	leaf     change.TableName
	foreign  bool // a foreign table: no ctid, copied whole
	ctid     bool // restrict by ctid
	from, to uint32
	open     bool
}

// leaf is a relation that holds rows of a source table: the table itself, or
// for a partitioned table each leaf partition.
type leaf struct {
	oid     uint32
	name    change.TableName
	foreign bool
}

// plan describes every table and splits it into partitions. tx reads the
// source (in the exported snapshot when there is one), dst the destination.
func plan(ctx context.Context, tx pgx.Tx, dst *pgx.Conn, mappings []change.Mapping, rowsPerPartition int) ([]*tableJob, error) {
	jobs := make([]*tableJob, 0, len(mappings))
	for _, m := range mappings {
		src, err := schemasync.Describe(ctx, tx, m.Source)
		if err != nil {
			return nil, fmt.Errorf("plan %s: source: %w", m.Source, err)
		}
		dt, err := schemasync.Describe(ctx, dst, m.Destination)
		if err != nil {
			return nil, fmt.Errorf("plan %s: destination: %w", m.Source, err)
		}
		job := &tableJob{m: m, binary: schemasync.BinaryCompatible(src, dt, m)}
		for _, c := range src.Replicated(m) {
			if _, ok := dt.Column(c.Name); !ok {
				return nil, fmt.Errorf("plan %s: destination table %s has no column %s: create or sync the destination schema first",
					m.Source, m.Destination, change.QuoteIdent(c.Name))
			}
			job.columns = append(job.columns, c.Name)
		}
		if len(job.columns) == 0 {
			return nil, fmt.Errorf("plan %s: no column to copy", m.Source)
		}
		leaves, err := leavesOf(ctx, tx, src)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", m.Source, err)
		}
		for _, l := range leaves {
			parts, err := splitLeaf(ctx, tx, l, rowsPerPartition)
			if err != nil {
				return nil, fmt.Errorf("plan %s: partition %s: %w", m.Source, l.name, err)
			}
			job.parts = append(job.parts, parts...)
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

func leavesOf(ctx context.Context, tx pgx.Tx, t schemasync.Table) ([]leaf, error) {
	if !t.Partitioned {
		var foreign bool
		if err := tx.QueryRow(ctx, `SELECT relkind = 'f' FROM pg_catalog.pg_class WHERE oid = $1`, t.OID).Scan(&foreign); err != nil {
			return nil, fmt.Errorf("read relation kind: %w", err)
		}
		return []leaf{{oid: t.OID, name: t.Name, foreign: foreign}}, nil
	}
	rows, err := tx.Query(ctx, `
SELECT c.oid, n.nspname::text, c.relname::text, c.relkind = 'f'
FROM pg_catalog.pg_partition_tree($1) p
JOIN pg_catalog.pg_class c ON c.oid = p.relid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'f')
ORDER BY n.nspname, c.relname`, t.OID)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	leaves, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leaf, error) {
		var l leaf
		err := row.Scan(&l.oid, &l.name.Schema, &l.name.Name, &l.foreign)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return leaves, nil
}

// splitLeaf cuts a leaf relation into ctid block ranges of about
// rowsPerPartition rows. The last range is open-ended, so rows in pages added
// after planning are still copied.
func splitLeaf(ctx context.Context, tx pgx.Tx, l leaf, rowsPerPartition int) ([]partition, error) {
	if l.foreign {
		return []partition{{leaf: l.name, foreign: true}}, nil
	}
	var pages int64
	var reltuples float64
	err := tx.QueryRow(ctx, `
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::bigint, c.reltuples::float8
FROM pg_catalog.pg_class c WHERE c.oid = $1`, l.oid).Scan(&pages, &reltuples)
	if err != nil {
		return nil, fmt.Errorf("read size: %w", err)
	}
	if pages == 0 {
		return []partition{{leaf: l.name}}, nil
	}
	rowsPerPage := reltuples / float64(pages)
	if reltuples <= 0 {
		// Never analyzed (-1) or analyzed while empty (0): count the rows of
		// the first pages, a TID range scan that reads only those pages.
		n := min(pages, samplePages)
		var count int64
		q := fmt.Sprintf(`SELECT count(*) FROM ONLY %s WHERE ctid < '(%d,0)'::tid`, l.name.Quoted(), n)
		if err := tx.QueryRow(ctx, q).Scan(&count); err != nil {
			return nil, fmt.Errorf("sample rows per page: %w", err)
		}
		rowsPerPage = float64(count) / float64(n)
	}
	if rowsPerPage <= 0 {
		rowsPerPage = defaultRowsPerPage
	}
	pagesPer := int64(float64(rowsPerPartition) / rowsPerPage)
	if pagesPer < 1 {
		pagesPer = 1
	}
	var parts []partition
	for from := int64(0); from < pages; from += pagesPer {
		p := partition{leaf: l.name, ctid: true, from: uint32(from), to: uint32(from + pagesPer)}
		if from+pagesPer >= pages {
			p.open = true
		}
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		parts[0].ctid = false // the whole relation
	}
	return parts, nil
}

// copyOutSQL is the source side of a partition's COPY.
func (j *tableJob) copyOutSQL(p partition) string {
	cols := quoteIdents(j.columns)
	var b strings.Builder
	if !p.ctid && !p.foreign {
		fmt.Fprintf(&b, "COPY %s (%s) TO STDOUT", p.leaf.Quoted(), cols)
	} else {
		fmt.Fprintf(&b, "COPY (SELECT %s FROM ONLY %s", cols, p.leaf.Quoted())
		if p.ctid {
			var conds []string
			if p.from > 0 {
				conds = append(conds, fmt.Sprintf("ctid >= '(%d,0)'::tid", p.from))
			}
			if !p.open {
				conds = append(conds, fmt.Sprintf("ctid < '(%d,0)'::tid", p.to))
			}
			if len(conds) > 0 {
				b.WriteString(" WHERE " + strings.Join(conds, " AND "))
			}
		}
		b.WriteString(") TO STDOUT")
	}
	if j.binary {
		b.WriteString(" (FORMAT binary)")
	}
	return b.String()
}

// copyInSQL is the destination side of the table's COPY.
func (j *tableJob) copyInSQL() string {
	s := fmt.Sprintf("COPY %s (%s) FROM STDIN", j.m.Destination.Quoted(), quoteIdents(j.columns))
	if j.binary {
		s += " (FORMAT binary)"
	}
	return s
}

func quoteIdents(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = change.QuoteIdent(n)
	}
	return strings.Join(quoted, ", ")
}
