package cdc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ddl"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/session"
)

// DDLReporter may also be implemented by a Reporter to hear of the schema
// changes captured by pgmirror's event trigger (Config.CaptureDDL) that the
// run applied on the destination.
type DDLReporter interface {
	// SchemaChangeApplied is called for each statement executed on the
	// destination, once the batch that carries it committed.
	SchemaChangeApplied(ctx context.Context, table change.TableName, statement string)
	// SchemaChangeRejected is called for what was left out: a statement
	// the destination rejected, an object whose name is taken there.
	SchemaChangeRejected(ctx context.Context, table change.TableName, warning string)
}

// schemaChange applies a schema change message at its place in the open
// transaction: for each mapped table it concerns, the destination table is
// reconciled with it in the batch's destination transaction, after the
// changes before it.
func (r *runner) schemaChange(ctx context.Context, msg *change.SchemaMessage) error {
	err := r.applySchemaChange(ctx, msg)
	var schemaStop *SchemaStopError
	if errors.As(err, &schemaStop) {
		schemaStop.At = r.txLSN
	}
	return err
}

// applySchemaChange is schemaChange without the stop position.
func (r *runner) applySchemaChange(ctx context.Context, msg *change.SchemaMessage) error {
	if !r.concernsMapped(msg.Table) {
		return nil
	}
	parsed, unreadable, err := r.openSchemaMessage(ctx, msg)
	if err != nil {
		return err
	}
	if unreadable != nil {
		// Not written by the trigger (anyone may write a message with
		// pgmirror's prefix), or unreadable: never executed.
		r.log.Warn("ignoring a schema change message", "lsn", msg.LSN.String(), "table", msg.Table.String(), "error", unreadable.Error())
		return nil
	}
	rep, _ := r.rep.(DDLReporter)
	var screened []string
	screenedOnce := false
	for _, m := range r.cfg.Tables {
		if !parsed.Concerns(m) || r.skipped(m.Source) {
			continue
		}
		if !screenedOnce {
			if screened, err = r.screenSchemaChange(ctx, parsed); err != nil {
				return fmt.Errorf("apply schema change of %s (%s) at %s: %w", m.Source, parsed.Tag, msg.LSN, err)
			}
			screenedOnce = true
		}
		if err := r.openBatch(ctx); err != nil {
			return err
		}
		res, left, err := r.reconcileCaptured(ctx, m, parsed)
		res.Warnings = append(slices.Clone(screened), res.Warnings...)
		if err != nil {
			return fmt.Errorf("apply schema change of %s (%s) at %s: %w", m.Source, parsed.Tag, msg.LSN, err)
		}
		r.ddlReports = append(r.ddlReports, func() { r.reportCaptured(ctx, rep, m, msg.LSN, left, res) })
	}
	return nil
}

// openSchemaMessage checks and reads a schema change message, reading the
// trigger's key again when the message is not signed with the one known
// (the trigger may have been installed again with a new key). unreadable
// says why a message is not to be executed; err is a failure to read the
// key.
func (r *runner) openSchemaMessage(ctx context.Context, msg *change.SchemaMessage) (parsed *ddl.Message, unreadable, err error) {
	m, openErr := ddl.Open(msg.Content, r.ddlKey, r.txXid)
	if errors.Is(openErr, ddl.ErrUnsigned) {
		changed, err := r.rereadDDLKey(ctx)
		if err != nil {
			return nil, nil, err
		}
		if changed {
			m, openErr = ddl.Open(msg.Content, r.ddlKey, r.txXid)
		}
	}
	if openErr != nil {
		return nil, openErr, nil
	}
	return &m, nil, nil
}

// screenSchemaChange leaves out the expressions that may not run with the
// destination role's privileges (exprcheck), for every mapping, and
// returns the warnings saying so.
func (r *runner) screenSchemaChange(ctx context.Context, parsed *ddl.Message) ([]string, error) {
	cat := r.srcCatalog
	if cat == nil {
		cat = &sourceCatalog{cfg: r.cfg.Source}
		defer cat.close()
	}
	return parsed.Screen(ctx, change.TableName{Schema: parsed.Schema, Name: parsed.Table}, cat.CheckExpressions)
}

// reconcileCaptured brings the destination table of m to the captured
// change in the batch's transaction, as the mirror's schema_changes says:
// applied (apply), planned and left alone (warn, returned as left), or the
// run stopped (stop).
func (r *runner) reconcileCaptured(ctx context.Context, m change.Mapping, parsed *ddl.Message) (res ddl.Result, left []string, err error) {
	if parsed.Kind == "state" {
		// Columns first: the indexes and constraints may name a column
		// renamed or added in this transaction, which the stream
		// describes only before the table's next row.
		cols := make([]apply.CapturedColumn, len(parsed.Columns))
		for i, c := range parsed.Columns {
			cols[i] = apply.CapturedColumn{Attnum: c.Attnum, Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod, Stored: c.Stored}
		}
		if err := r.applier.ColumnsCaptured(ctx, m.Source, cols); err != nil {
			return res, nil, err
		}
	}
	mode := apply.SchemaMode(r.cfg.SchemaChanges)
	err = r.applier.ExecSchemaChange(ctx, m.Destination, func(ctx context.Context, conn *pgx.Conn) error {
		if mode != apply.SchemaWarn && mode != apply.SchemaStop {
			var err error
			res, err = ddl.Reconcile(ctx, conn, m, *parsed)
			return err
		}
		stmts, warnings, err := ddl.Plan(ctx, conn, m, *parsed)
		if err != nil {
			return err
		}
		if mode == apply.SchemaStop && len(stmts) > 0 {
			return &apply.SchemaStopError{Table: m.Source, Changes: stmts}
		}
		res.Warnings, left = warnings, stmts
		return nil
	})
	return res, left, err
}

// reportCaptured reports what a captured schema change did on the
// destination table of m, once its batch committed: the statements left
// alone under warn, those applied, and those the destination rejected.
func (r *runner) reportCaptured(ctx context.Context, rep DDLReporter, m change.Mapping, lsn change.LSN, left []string, res ddl.Result) {
	if warner, ok := r.rep.(SchemaChangeReporter); ok {
		for _, stmt := range left {
			warner.SchemaChangeWarned(ctx, m.Source, "captured on the source, not applied: "+stmt)
		}
	}
	for _, stmt := range left {
		r.log.Warn("schema change not applied (schema_changes is warn)", "table", m.Destination.String(), "statement", stmt, "lsn", lsn.String())
	}
	for _, stmt := range res.Applied {
		r.log.Info("Schema change applied", "table", m.Destination.String(), "statement", stmt, "lsn", lsn.String())
		if rep != nil {
			rep.SchemaChangeApplied(ctx, m.Destination, stmt)
		}
	}
	for _, w := range res.Warnings {
		r.log.Warn("schema change not applied", "table", m.Destination.String(), "warning", w, "lsn", lsn.String())
		if rep != nil {
			rep.SchemaChangeRejected(ctx, m.Destination, w)
		}
	}
}

// concernsMapped reports whether a schema change message about table (Name
// "" for a dropped index of the schema) may concern a mapped table.
func (r *runner) concernsMapped(table change.TableName) bool {
	for _, m := range r.cfg.Tables {
		if m.Source.Schema == table.Schema && (table.Name == "" || m.Source.Name == table.Name) {
			return true
		}
	}
	return false
}

// readDDLKey reads the key that signs the DDL capture trigger's messages
// on the source. Without it (the trigger is missing, or the source user
// may not read it any more) no schema change message is applied: the run
// logs a warning and goes on. A key, or another object of _pgmirror, that
// a role other than the source peer's user owns (ownership.ErrForeignOwner)
// is an error of the run: that role could sign messages of its own.
func readDDLKey(ctx context.Context, src *pgx.Conn, logger *slog.Logger) (string, error) {
	key, err := ddl.ReadKey(ctx, src)
	if errors.Is(err, ownership.ErrForeignOwner) {
		return "", fmt.Errorf("capture_ddl: %w", err)
	}
	if err != nil {
		logger.Warn("capture_ddl is on but the key of the DDL capture trigger cannot be read on the source; schema change messages are ignored", "error", err.Error())
		return "", nil
	}
	return key, nil
}

// ddlKeyReread bounds how often a message that fails its signature check
// makes the run read the key again.
const ddlKeyReread = 10 * time.Second

// rereadDDLKey reads the signing key again on a connection of its own, at
// most every ddlKeyReread, and reports whether it changed. Its error is a
// key owned by another role (see readDDLKey).
func (r *runner) rereadDDLKey(ctx context.Context) (bool, error) {
	if time.Since(r.ddlKeyRead) < ddlKeyReread {
		return false, nil
	}
	r.ddlKeyRead = time.Now()
	src, err := session.Connect(ctx, r.cfg.Source)
	if err != nil {
		r.log.Warn("cannot connect to the source to read the key of the DDL capture trigger again", "error", err.Error())
		return false, nil
	}
	defer closeQuietly(src)
	key, err := ddl.ReadKey(ctx, src)
	if errors.Is(err, ownership.ErrForeignOwner) {
		return false, fmt.Errorf("capture_ddl: %w", err)
	}
	if err != nil || key == r.ddlKey {
		return false, nil
	}
	r.ddlKey = key
	return true, nil
}
