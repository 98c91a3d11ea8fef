package apply

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file writes the chunk of a table whose destination has a usable
// primary key: the final state of every key goes by COPY into a staging
// table, then a few set-based statements apply it.

// flushKeyed loads the final state of every key into the staging table and
// applies it with set-based statements: deletes, upserts of complete rows,
// and updates of rows with unchanged TOAST columns (one per set of
// unchanged columns).
func (a *Applier) flushKeyed(ctx context.Context, p *plan) error {
	if len(p.entries) == 0 {
		return nil
	}
	if err := a.prepareStage(ctx, p); err != nil {
		return err
	}
	buf := &a.copyBuf
	buf.Reset()
	hasDel := false
	masks := map[string]bool{}
	for _, k := range p.order {
		e := p.entries[k]
		if e.del {
			hasDel = true
			buf.WriteString("d\t\t")
			writeCopyRow(buf, e.vals, p.keyPos)
			continue
		}
		m := unchangedMask(e.vals)
		masks[m] = true
		buf.WriteString("u\t")
		buf.WriteString(m)
		buf.WriteByte('\t')
		writeCopyRow(buf, e.vals, nil)
	}
	if _, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf.Bytes()), copyStageSQL(p.stage)); err != nil {
		return fmt.Errorf("load staging rows for %s: %w", p.dest.name, err)
	}
	p.stageUsed = true
	clear(p.entries)
	p.order = p.order[:0]

	batch := &pgx.Batch{}
	var what []string
	if hasDel {
		batch.Queue(deleteSQL(p.dest.name, p.stage, p.names, p.types, p.keyPos))
		what = append(what, "delete")
	}
	if masks[""] {
		batch.Queue(upsertSQL(p.dest.name, p.stage, p.names, p.types, p.keyPos))
		what = append(what, "upsert")
	}
	maskList := make([]string, 0, len(masks))
	for m := range masks {
		if m != "" {
			maskList = append(maskList, m)
		}
	}
	sort.Strings(maskList)
	for _, m := range maskList {
		sql := maskedUpdateSQL(p.dest.name, p.stage, p.names, p.types, p.keyPos, parseMask(m))
		if sql == "" {
			continue
		}
		batch.Queue(sql, m)
		what = append(what, "update")
	}
	br := a.tx.SendBatch(ctx, batch)
	for _, w := range what {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return classify(fmt.Errorf("apply %s to %s: %w", w, p.dest.name, err))
		}
	}
	if err := br.Close(); err != nil {
		return classify(fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
	}
	return nil
}

// prepareStage makes sure p's staging table exists and is empty.
func (a *Applier) prepareStage(ctx context.Context, p *plan) error {
	if p.stage != "" {
		if p.stageUsed {
			if _, err := a.tx.Exec(ctx, truncateStageSQL(p.stage)); err != nil {
				return fmt.Errorf("empty staging table for %s: %w", p.dest.name, err)
			}
			p.stageUsed = false
		}
		return nil
	}
	a.stageSeq++
	name := fmt.Sprintf("pgmirror_stage_%d", a.stageSeq)
	if _, err := a.tx.Exec(ctx, createStageSQL(name, len(p.names))); err != nil {
		return fmt.Errorf("create staging table for %s: %w", p.dest.name, err)
	}
	p.stage = name
	return nil
}

// moveRow updates the row at the old key to the new image, leaving
// unchanged columns alone.
func (a *Applier) moveRow(ctx context.Context, p *plan, oldVals, vals []change.Value) error {
	var (
		set  []int
		args []any
	)
	for i, v := range vals {
		if v.Kind != change.ValueUnchanged {
			set = append(set, i)
			args = append(args, textArg(v))
		}
	}
	for _, k := range p.keyPos {
		args = append(args, textArg(oldVals[k]))
	}
	if _, err := a.tx.Exec(ctx, moveSQL(p.dest.name, p.names, p.types, set, p.keyPos), args...); err != nil {
		return classify(fmt.Errorf("move row of %s to a new key: %w", p.dest.name, err))
	}
	return nil
}
