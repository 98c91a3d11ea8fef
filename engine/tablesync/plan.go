package tablesync

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// defaultRowsPerPage is the density assumed for a table whose statistics and
// sample say nothing.
const defaultRowsPerPage = 100

// samplePages is how many leading pages are counted when a table has never
// been analyzed.
const samplePages = 16

// tableJob is one mapping to copy.
type tableJob struct {
	m          change.Mapping
	columns    []string // replicated columns, in source attnum order
	binary     bool
	streams    []stream
	partitions int          // over all streams
	bytes      int64        // the source table's size, TOAST included
	writers    int          // streams copied at once
	estimate   int64        // the source's estimate of the table's rows
	streamed   atomic.Int64 // rows sent to the destination so far (ProgressReporter)
	// upsertKey is the destination's primary key when the table keeps its
	// rows (KeepRows) and has some: each partition is upserted by it.
	upsertKey []string
	// sourceColumns are the source table's columns as of the snapshot, as
	// the stream describes them (live, not generated), by attnum.
	sourceColumns []positions.SourceColumn
	// foreignOwner is the destination table's owner when it is neither
	// the destination session's role nor a superuser: every partition's
	// transaction is guarded (exprcheck.GuardWrites).
	foreignOwner string
}

// stream is one source COPY of one leaf relation, committed on the
// destination in parts partitions: the whole leaf, or (for a table with
// several writers) the rows whose ctid lies in blocks [from, to), or from
// block from to the end when open.
type stream struct {
	leaf     change.TableName
	foreign  bool // a foreign table: no ctid
	ctid     bool // restrict by ctid
	from, to uint32
	open     bool
	// parts is how many partitions (destination transactions) the stream
	// is cut into: chunkRows rows each, the last one takes the rest.
	parts     int
	chunkRows int64
}

// leaf is a relation that holds rows of a source table: the table itself, or
// for a partitioned table each leaf partition.
type leaf struct {
	oid         uint32
	name        change.TableName
	foreign     bool
	pages       int64   // heap pages
	bytes       int64   // heap, TOAST and maps
	rowsPerPage float64 // from the statistics or a sample; 0 when unknown
}

// sourceTable is what planning learns about a source table.
type sourceTable struct {
	desc   schemasync.Table
	leaves []leaf
}

// planSource describes every source table of mappings and measures its leaf
// relations, in tx (which sees the exported snapshot when there is one).
func planSource(ctx context.Context, tx pgx.Tx, mappings []change.Mapping) ([]sourceTable, error) {
	out := make([]sourceTable, len(mappings))
	for i, m := range mappings {
		desc, err := schemasync.Describe(ctx, tx, m.Source)
		if err != nil {
			return nil, fmt.Errorf("plan %s: source: %w", m.Source, err)
		}
		leaves, err := leavesOf(ctx, tx, desc)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %w", m.Source, err)
		}
		for j := range leaves {
			if err := sampleDensity(ctx, tx, &leaves[j]); err != nil {
				return nil, fmt.Errorf("plan %s: partition %s: %w", m.Source, leaves[j].name, err)
			}
		}
		out[i] = sourceTable{desc: desc, leaves: leaves}
	}
	return out, nil
}

// planDest describes every destination table of mappings.
func planDest(ctx context.Context, dst *pgx.Conn, mappings []change.Mapping) ([]schemasync.Table, error) {
	out := make([]schemasync.Table, len(mappings))
	for i, m := range mappings {
		dt, err := schemasync.Describe(ctx, dst, m.Destination)
		if err != nil {
			return nil, fmt.Errorf("plan %s: destination: %w", m.Source, err)
		}
		out[i] = dt
	}
	return out, nil
}

// makeJobs matches the source and destination tables of mappings and cuts
// each table into partitions within l.
func makeJobs(mappings []change.Mapping, srcs []sourceTable, dsts []schemasync.Table, l limits) ([]*tableJob, error) {
	jobs := make([]*tableJob, 0, len(mappings))
	for i, m := range mappings {
		src, dt := srcs[i], dsts[i]
		job := &tableJob{m: m, binary: schemasync.BinaryCompatible(src.desc, dt, m), foreignOwner: dt.ForeignOwner}
		job.sourceColumns = ShapeOf(src.desc)
		for _, c := range src.desc.Replicated(m) {
			if _, ok := dt.Column(c.Name); !ok {
				return nil, fmt.Errorf("plan %s: destination table %s has no column %s: create or sync the destination schema first",
					m.Source, m.Destination, sqlquote.Ident(c.Name))
			}
			job.columns = append(job.columns, c.Name)
		}
		if len(job.columns) == 0 {
			return nil, fmt.Errorf("plan %s: no column to copy", m.Source)
		}
		for _, lf := range src.leaves {
			job.bytes += lf.bytes
			job.estimate += int64(lf.rowsPerPage * float64(lf.pages))
			job.partitions += len(splitLeaf(lf, l.rowsPerPartition))
		}
		// A table with one writer reads each leaf in one stream (a plain
		// COPY, the cheapest scan: a ctid range is a TID range scan, which
		// costs the source twice the CPU); several writers need ctid ranges.
		job.writers = tableWriters(job.bytes, job.partitions, l)
		for _, lf := range src.leaves {
			if job.writers > 1 {
				job.streams = append(job.streams, splitLeaf(lf, l.rowsPerPartition)...)
			} else {
				job.streams = append(job.streams, wholeLeaf(lf, l.rowsPerPartition))
			}
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// leavesOf lists the relations that hold t's rows, with their sizes.
func leavesOf(ctx context.Context, tx pgx.Tx, t schemasync.Table) ([]leaf, error) {
	const q = `
SELECT c.oid, n.nspname::text, c.relname::text, c.relkind = 'f',
       CASE WHEN c.relkind = 'f' THEN 0
            ELSE pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::bigint END,
       CASE WHEN c.relkind = 'f' THEN 0 ELSE pg_catalog.pg_table_size(c.oid) END,
       c.reltuples::float8
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'f') AND `
	// A plain table is one leaf, even with inheritance children (COPY of
	// the parent does not read them either).
	where := `c.oid = $1`
	if t.Partitioned {
		where = `c.oid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1))
ORDER BY n.nspname, c.relname`
	}
	rows, err := tx.Query(ctx, q+where, t.OID)
	if err != nil {
		return nil, fmt.Errorf("list leaf relations: %w", err)
	}
	leaves, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leaf, error) {
		var l leaf
		var reltuples float64
		err := row.Scan(&l.oid, &l.name.Schema, &l.name.Name, &l.foreign, &l.pages, &l.bytes, &reltuples)
		if l.pages > 0 && reltuples > 0 {
			l.rowsPerPage = reltuples / float64(l.pages)
		}
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("list leaf relations: %w", err)
	}
	if len(leaves) == 0 && !t.Partitioned {
		return nil, fmt.Errorf("relation %s is neither a table nor a foreign table", t.Name)
	}
	return leaves, nil
}

// sampleDensity estimates the rows per page of a leaf that has pages but no
// statistics (never analyzed, or analyzed while empty) by counting the rows
// of its first pages, a TID range scan that reads only those pages.
func sampleDensity(ctx context.Context, tx pgx.Tx, l *leaf) error {
	if l.foreign || l.pages == 0 || l.rowsPerPage > 0 {
		return nil
	}
	n := min(l.pages, samplePages)
	var count int64
	q := fmt.Sprintf(`SELECT pg_catalog.count(*) FROM ONLY %s WHERE ctid OPERATOR(pg_catalog.<) '(%d,0)'::pg_catalog.tid`, l.name.Quoted(), n)
	if err := tx.QueryRow(ctx, q).Scan(&count); err != nil {
		return fmt.Errorf("sample rows per page: %w", err)
	}
	l.rowsPerPage = float64(count) / float64(n)
	return nil
}

// splitLeaf cuts a leaf relation into ctid block ranges of about
// rowsPerPartition rows (partitionPages), one partition each. The last range
// is open-ended, so rows in pages added after planning are still copied.
func splitLeaf(l leaf, rowsPerPartition int) []stream {
	if l.foreign || l.pages == 0 {
		return []stream{{leaf: l.name, foreign: l.foreign, parts: 1}}
	}
	pagesPer := partitionPages(l.rowsPerPage, rowsPerPartition)
	var parts []stream
	for from := int64(0); from < l.pages; from += pagesPer {
		p := stream{leaf: l.name, ctid: true, from: uint32(from), to: uint32(min(from+pagesPer, maxPartitionPages-1)), parts: 1}
		if from+pagesPer >= l.pages {
			p.open = true
		}
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		parts[0].ctid = false // the whole relation
	}
	return parts
}

// wholeLeaf is a leaf relation read in one stream and committed in as many
// partitions as splitLeaf would cut it into, of the same number of rows.
func wholeLeaf(l leaf, rowsPerPartition int) stream {
	s := stream{leaf: l.name, foreign: l.foreign, parts: len(splitLeaf(l, rowsPerPartition)), chunkRows: int64(max(rowsPerPartition, 1))}
	if l.rowsPerPage > 0 {
		s.chunkRows = max(int64(float64(partitionPages(l.rowsPerPage, rowsPerPartition))*l.rowsPerPage), 1)
	}
	return s
}

// copyOutSQL is the source side of a stream's COPY.
func (j *tableJob) copyOutSQL(p stream) string {
	cols := sqlquote.Idents(j.columns)
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
	s := fmt.Sprintf("COPY %s (%s) FROM STDIN", j.m.Destination.Quoted(), sqlquote.Idents(j.columns))
	if j.binary {
		s += " (FORMAT binary)"
	}
	return s
}
