package apply

import (
	"bytes"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file applies the changes of a table without a usable key, in order.

// flushOrdered applies the changes of a table without a usable key in
// order: runs of inserts by COPY, each update and delete on exactly one
// matching row.
func (a *Applier) flushOrdered(ctx context.Context, p *plan) error {
	buf := &a.copyBuf
	buf.Reset()
	batch := &pgx.Batch{}
	var stmts []string
	copySQL := copyTargetSQL(p.dest.name, p.names)
	flushInserts := func() error {
		if buf.Len() == 0 {
			return nil
		}
		_, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf.Bytes()), copySQL)
		buf.Reset()
		if err != nil {
			return classify(fmt.Errorf("copy inserted rows into %s: %w", p.dest.name, err))
		}
		return nil
	}
	flushStmts := func() error {
		if len(stmts) == 0 {
			return nil
		}
		br := a.tx.SendBatch(ctx, batch)
		for _, op := range stmts {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return classify(fmt.Errorf("apply %s to %s: %w", op, p.dest.name, err))
			}
			if tag.RowsAffected() == 0 {
				a.log.Warn("no destination row matched a replicated change", "table", p.dest.name.String(), "op", op)
			}
		}
		batch = &pgx.Batch{}
		stmts = stmts[:0]
		if err := br.Close(); err != nil {
			return classify(fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
		}
		return nil
	}
	for _, c := range p.ops {
		if c.Op == change.OpInsert {
			if err := flushStmts(); err != nil {
				return err
			}
			writeCopyRow(buf, p.project(c.New), nil)
			continue
		}
		if err := flushInserts(); err != nil {
			return err
		}
		sql, vals := p.rowStatement(c)
		args := make([]any, len(vals))
		for i, v := range vals {
			args[i] = textArg(v)
		}
		batch.Queue(sql, args...)
		stmts = append(stmts, c.Op.String())
	}
	p.ops = p.ops[:0]
	if err := flushStmts(); err != nil {
		return err
	}
	return flushInserts()
}

// rowStatement returns the statement that updates or deletes exactly one
// destination row matching the change's old image, and the values of its
// parameters in order.
func (p *plan) rowStatement(c *change.Change) (string, []change.Value) {
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
			return rowSQL(p.dest.name, p.dest.partitioned, false, p.names, p.types, nil, nil), nil
		}
	}
	for _, i := range match {
		if old[i].Kind != change.ValueUnchanged {
			where = append(where, i)
			args = append(args, old[i])
		}
	}
	return rowSQL(p.dest.name, p.dest.partitioned, c.Op == change.OpDelete, p.names, p.types, set, where), args
}

// textArg is v as a text parameter (nil for NULL).
func textArg(v change.Value) any {
	if v.Kind != change.ValueText {
		return nil
	}
	return string(v.Text)
}
