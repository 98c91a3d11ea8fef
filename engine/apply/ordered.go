package apply

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file applies the changes of a table without a usable key, in order,
// and sends the one-row statements that this path (and a keyed row moving
// to a new key) needs.

// flushOrdered applies the changes of a table without a usable key in
// order: runs of inserts by COPY straight into the table, each update and
// delete on exactly one matching row.
func (a *Applier) flushOrdered(ctx context.Context, p *plan) error {
	if err := a.begin(ctx); err != nil {
		return err
	}
	binary := p.binaryChunk()
	w := &a.copy
	w.reset(binary)
	rows := 0
	b := a.newRowBatch(ctx, binary)
	copySQL := copyTargetSQL(p.dest.name, p.names, binary)
	flushInserts := func() error {
		if rows == 0 {
			return nil
		}
		data, err := w.data()
		if err == nil {
			err = a.copyFrom(ctx, w, data, copySQL)
		}
		w.reset(binary)
		rows = 0
		if err != nil {
			return classify(fmt.Errorf("copy inserted rows into %s: %w", p.dest.name, err))
		}
		return nil
	}
	flushStmts := func() error {
		if len(b.ops) == 0 {
			return nil
		}
		affected, err := a.sendRows(ctx, p, b)
		if err != nil {
			return err
		}
		for i, n := range affected {
			if n == 0 {
				a.log.Warn("no destination row matched a replicated change", "table", p.dest.name.String(), "op", b.ops[i])
			}
		}
		b = a.newRowBatch(ctx, binary)
		return nil
	}
	for _, c := range p.ops {
		if c.Op == change.OpInsert {
			if err := flushStmts(); err != nil {
				return err
			}
			w.row(p.project(c.New))
			rows++
			continue
		}
		if err := flushInserts(); err != nil {
			return err
		}
		sql, args, cols := p.rowStatement(c)
		if err := b.queue(p, c.Op.String(), sql, args, cols); err != nil {
			return fmt.Errorf("apply %s to %s: %w", c.Op, p.dest.name, err)
		}
	}
	p.ops = p.ops[:0]
	if err := flushStmts(); err != nil {
		return err
	}
	return flushInserts()
}

// rowStatement returns the statement that updates or deletes exactly one
// destination row matching the change's old image, the values of its
// parameters in order, and the applied column of each.
func (p *plan) rowStatement(c *change.Change) (string, []change.Value, []int) {
	var old []change.Value
	match := p.identPos
	switch {
	case c.Old != nil:
		old = p.project(c.Old)
		if !c.OldKeyOnly {
			match = make([]int, len(p.names))
			for i := range match {
				match[i] = i
			}
		}
	default: // an update that kept its key: the key is in the new image
		old = p.project(c.New)
	}
	var (
		set, where []int
		args       []change.Value
	)
	if c.Op == change.OpUpdate {
		for i, v := range p.project(c.New) {
			if v.Kind != change.ValueUnchanged {
				set = append(set, i)
				args = append(args, v)
			}
		}
		if len(set) == 0 {
			return rowSQL(p.dest.name, p.dest.partitioned, false, p.names, p.types, nil, nil), nil, nil
		}
	}
	for _, i := range match {
		if old[i].Kind != change.ValueUnchanged {
			where = append(where, i)
			args = append(args, old[i])
		}
	}
	return rowSQL(p.dest.name, p.dest.partitioned, c.Op == change.OpDelete, p.names, p.types, set, where), args, append(set, where...)
}

// rowBatch pipelines one-row statements. Text values go as text parameters
// through pgx (which prepares each statement once); binary values go as
// binary parameters typed with the destination column's type OID.
type rowBatch struct {
	ctx    context.Context // for preparing statements (binary mode)
	a      *Applier
	binary bool
	begins bool // the first statement is the batch transaction's BEGIN
	text   pgx.Batch
	bin    pgconn.Batch
	ops    []string // what each statement does, for messages
}

// tailRows are the row statements of a batch's last plan, left for the
// commit's round trip (Applier.Commit).
type tailRows struct {
	plan *plan
	rows *rowBatch
}

// newRowBatch starts a row batch; when the batch transaction's BEGIN was
// not sent yet, it goes first in the same round trip.
func (a *Applier) newRowBatch(ctx context.Context, binary bool) *rowBatch {
	b := &rowBatch{binary: binary, begins: !a.begun, ctx: ctx, a: a}
	if b.begins {
		if binary {
			b.bin.ExecParams("BEGIN", nil, nil, nil, nil)
		} else {
			b.text.Queue("BEGIN")
		}
	}
	return b
}

// queue adds a statement whose parameters are args, the values of p's
// applied columns cols.
func (b *rowBatch) queue(p *plan, op, sql string, args []change.Value, cols []int) error {
	if !b.binary {
		params := make([]any, len(args))
		for i, v := range args {
			switch v.Kind {
			case change.ValueText:
				params[i] = string(v.Text)
			case change.ValueBinary:
				return mixedError(false)
			}
		}
		b.text.Queue(sql, params...)
		b.ops = append(b.ops, op)
		return nil
	}
	values := make([][]byte, len(args))
	oids := make([]uint32, len(args))
	formats := make([]int16, len(args))
	for i, v := range args {
		switch v.Kind {
		case change.ValueBinary:
			values[i] = v.Text
			if values[i] == nil {
				values[i] = []byte{} // an empty value, not NULL
			}
		case change.ValueText:
			return mixedError(true)
		}
		oids[i] = p.typeOIDs[cols[i]]
		formats[i] = 1
	}
	name, err := b.a.prepared(b.ctx, sql, oids)
	if err != nil {
		return err
	}
	b.bin.ExecPrepared(name, values, formats, nil)
	b.ops = append(b.ops, op)
	return nil
}

// sendRows sends b's statements on p's table and returns the rows each
// affected.
func (a *Applier) sendRows(ctx context.Context, p *plan, b *rowBatch) ([]int64, error) {
	affected := make([]int64, 0, len(b.ops))
	if !b.binary {
		br := a.conn.SendBatch(ctx, &b.text)
		if b.begins {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return nil, fmt.Errorf("begin destination transaction: %w", err)
			}
			a.begun = true
		}
		for _, op := range b.ops {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return nil, classify(fmt.Errorf("apply %s to %s: %w", op, p.dest.name, err))
			}
			affected = append(affected, tag.RowsAffected())
		}
		if err := br.Close(); err != nil {
			return nil, classify(fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
		}
		return affected, nil
	}
	results, err := a.conn.PgConn().ExecBatch(ctx, &b.bin).ReadAll()
	if b.begins && len(results) > 0 {
		if results[0].Err != nil {
			return nil, fmt.Errorf("begin destination transaction: %w", results[0].Err)
		}
		a.begun = true
		results = results[1:]
	}
	for i, r := range results {
		if r.Err != nil && i < len(b.ops) {
			return nil, classify(fmt.Errorf("apply %s to %s: %w", b.ops[i], p.dest.name, r.Err))
		}
		affected = append(affected, r.CommandTag.RowsAffected())
	}
	if err != nil {
		return nil, classify(fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
	}
	return affected, nil
}

// prepared returns the name of a prepared statement for sql with parameter
// types oids on the applier's connection, preparing it the first time:
// binary row statements are parsed and planned once per connection, as pgx
// does for the text ones.
func (a *Applier) prepared(ctx context.Context, sql string, oids []uint32) (string, error) {
	if name, ok := a.statements[sql]; ok {
		return name, nil
	}
	name := fmt.Sprintf("pgmirror_row_%d", len(a.statements)+1)
	if _, err := a.conn.PgConn().Prepare(ctx, name, sql, oids); err != nil {
		return "", fmt.Errorf("prepare %s: %w", sql, err)
	}
	a.statements[sql] = name
	return name, nil
}
