package ddl

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/pgversion"
)

// Conn is what the functions of this package need of a connection.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Names of the objects Install creates in the source database.
const (
	Schema                 = ownership.Schema
	CommandEndTrigger      = "pgmirror_ddl_command_end"
	SQLDropTrigger         = "pgmirror_ddl_sql_drop"
	stateFunction          = Schema + ".pgmirror_ddl_table_state"
	emitFunction           = Schema + ".pgmirror_ddl_emit"
	keyTable               = Schema + ".pgmirror_ddl_key"
	commandEndFunction     = Schema + "." + CommandEndTrigger
	sqlDropFunction        = Schema + "." + SQLDropTrigger
	installLock        int = 0x70676d64 // "pgmd": serializes Install and Remove
)

// ErrNotPermitted matches (errors.Is) a source on which the event trigger
// cannot be installed: the peer user is not a superuser (PostgreSQL 15 and
// older let only superusers create event triggers), or the source is older
// than PostgreSQL 14 (pgoutput sends logical decoding messages since 14).
var ErrNotPermitted = errors.New("capture_ddl is not possible on this source")

// CheckPermitted returns an error matching ErrNotPermitted, saying what is
// needed, when Install would fail on conn's database for lack of privilege
// or version.
func CheckPermitted(ctx context.Context, conn Conn) error {
	var version int
	var super bool
	var user string
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, r.rolsuper, r.rolname::text
		FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`).Scan(&version, &super, &user)
	if err != nil {
		return fmt.Errorf("check the source's version and privileges: %w", err)
	}
	if srv := pgversion.Of(version); !srv.SchemaMessages() {
		return fmt.Errorf("%w: the source runs %s, and captured schema changes travel in logical decoding messages, which pgoutput sends from PostgreSQL 14 on; "+
			"leave capture_ddl off on this source (added columns still replicate from the stream) or upgrade it", ErrNotPermitted, srv)
	}
	if !super {
		return fmt.Errorf("%w: it installs an event trigger on the source database, which only a superuser may create, and the peer user %q is not one; "+
			"connect the source peer as a superuser, or leave capture_ddl off (added columns still replicate from the stream)", ErrNotPermitted, user)
	}
	return nil
}

// tableStateSQL creates the function that describes a table's state as the
// JSON of a State (NULL for what is not a plain or partitioned table, or is
// temporary). Names are printed with only pg_catalog on the search path, so
// that they read the same on any database.
const tableStateSQL = `CREATE OR REPLACE FUNCTION ` + stateFunction + `(rel oid, tag text) RETURNS jsonb
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $f$
SELECT jsonb_build_object(
  'v', 1, 'kind', 'state', 'tag', tag, 'schema', n.nspname, 'table', c.relname, 'trees', true,
  'indexes', COALESCE((SELECT jsonb_agg(jsonb_build_object(
        'name', ic.relname, 'def', pg_get_indexdef(i.indexrelid), 'unique', i.indisunique,
        'tree', concat_ws(' ', i.indexprs::text, i.indpred::text),
        'prefix', 'CREATE ' || CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' || quote_ident(ic.relname) || ' ON ' ||
                  CASE WHEN c.relkind = 'p' THEN 'ONLY ' ELSE '' END || quote_ident(n.nspname) || '.' || quote_ident(c.relname) || ' USING ')
      ORDER BY ic.relname)
    FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
    WHERE i.indrelid = c.oid AND NOT i.indisprimary
      AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))), '[]'::jsonb),
  'constraints', COALESCE((SELECT jsonb_agg(jsonb_build_object(
        'name', k.conname, 'type', k.contype, 'def', pg_get_constraintdef(k.oid), 'validated', k.convalidated,
        'tree', concat_ws(' ', k.conbin::text,
          (SELECT concat_ws(' ', x.indexprs::text, x.indpred::text) FROM pg_index x WHERE x.indexrelid = k.conindid),
          (SELECT string_agg(':opno ' || op::text, ' ') FROM unnest(k.conexclop) op)))
      ORDER BY k.conname)
    FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype IN ('c', 'u', 'x')), '[]'::jsonb),
  'columns', COALESCE((SELECT jsonb_agg(jsonb_build_object(
        'attnum', a.attnum, 'name', a.attname, 'not_null', a.attnotnull,
        'type_oid', a.atttypid::bigint, 'typmod', a.atttypmod, 'stored', a.attgenerated <> '',
        'generated', a.attgenerated <> '' OR a.attidentity <> '',
        'default', CASE WHEN a.attgenerated = '' AND a.attidentity = '' THEN pg_get_expr(d.adbin, d.adrelid) END,
        'default_tree', CASE WHEN a.attgenerated = '' AND a.attidentity = '' THEN d.adbin::text END)
      ORDER BY a.attnum)
    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '[]'::jsonb))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = rel AND c.relkind IN ('r', 'p') AND c.relpersistence <> 't'
$f$`

// keySQL creates the table of the key that signs the messages: readable by
// its owner (the superuser who installed the trigger) and superusers only,
// generated on the server so that it never appears in a statement's text.
const keySQL = `CREATE TABLE IF NOT EXISTS ` + keyTable + ` (key text NOT NULL);
REVOKE ALL ON ` + keyTable + ` FROM PUBLIC;
INSERT INTO ` + keyTable + ` SELECT pg_catalog.replace(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text, '-', '')
WHERE NOT EXISTS (SELECT 1 FROM ` + keyTable + `)`

// emitSQL creates the function that writes a message: the JSON body with
// the writing transaction's id added, preceded by its signature (see Open)
// over the bytes the message carries (the server's encoding).
// Only its owner may call it (the trigger functions, SECURITY DEFINER, run
// as that owner); anyone can call pg_logical_emit_message, but without the
// key their messages are not signed and pgmirror ignores them.
const emitSQL = `CREATE OR REPLACE FUNCTION ` + emitFunction + `(body jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
  k text := (SELECT key FROM ` + keyTable + ` LIMIT 1);
  t text := (body || jsonb_build_object('xid', pg_current_xact_id()::text::bigint % 4294967296))::text;
  enc text := current_setting('server_encoding');
BEGIN
  PERFORM pg_logical_emit_message(true, 'pgmirror_ddl',
    encode(sha256(convert_to(k || encode(sha256(convert_to(k || t, enc)), 'hex'), enc)), 'hex') || t);
END
$f$;
REVOKE ALL ON FUNCTION ` + emitFunction + `(jsonb) FROM PUBLIC`

// emitCollected ends the trigger functions: the block that collected the
// messages into msgs gives up with a WARNING on any error (the user's DDL
// goes through, uncaptured), and the messages are written after it, outside
// that subtransaction (see commandEndSQL).
const emitCollected = `
  EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'pgmirror: this schema change is not captured for replication: %', SQLERRM;
    RETURN;
  END;
  FOREACH msg IN ARRAY msgs LOOP
    PERFORM ` + emitFunction + `(msg);
  END LOOP;
END
$f$`

// commandEndSQL creates the ddl_command_end function: one state message per
// table the command touched.
//
// The messages are written outside the block that catches errors: that
// block is a subtransaction, and logical decoding orders a message written
// in a subtransaction by the end of its WAL record, which is where the
// transaction's next change starts, so that change could be decoded first
// (a row inserted right after DROP CONSTRAINT would then meet the
// constraint on the destination).
const commandEndSQL = `CREATE OR REPLACE FUNCTION ` + commandEndFunction + `() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
  rel oid;
  msg jsonb;
  msgs jsonb[] := '{}';
BEGIN
  BEGIN
    FOR rel IN
      SELECT DISTINCT CASE WHEN cmd.object_type = 'index'
                           THEN (SELECT i.indrelid FROM pg_index i WHERE i.indexrelid = cmd.objid)
                           ELSE cmd.objid END
      FROM pg_event_trigger_ddl_commands() cmd
      WHERE cmd.object_type IN ('table', 'index') AND NOT cmd.in_extension
    LOOP
      CONTINUE WHEN rel IS NULL;
      msg := ` + stateFunction + `(rel, TG_TAG);
      CONTINUE WHEN msg IS NULL;
      msgs := msgs || msg;
    END LOOP;
` + emitCollected

// sqlDropSQL creates the sql_drop function: one drop message per dropped
// index or table constraint. An index's table is gone from the catalog by
// then: its message names the schema and the index only.
const sqlDropSQL = `CREATE OR REPLACE FUNCTION ` + sqlDropFunction + `() RETURNS event_trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $f$
DECLARE
  obj record;
  msg jsonb;
  msgs jsonb[] := '{}';
BEGIN
  BEGIN
    FOR obj IN
      SELECT d.object_type, d.address_names FROM pg_event_trigger_dropped_objects() d
      WHERE d.object_type IN ('index', 'table constraint') AND NOT d.is_temporary
    LOOP
      msgs := msgs || jsonb_build_object(
        'v', 1, 'kind', 'drop', 'tag', TG_TAG,
        'object', CASE WHEN obj.object_type = 'index' THEN 'index' ELSE 'constraint' END,
        'schema', obj.address_names[1],
        'table', CASE WHEN obj.object_type = 'index' THEN '' ELSE obj.address_names[2] END,
        'name', obj.address_names[array_length(obj.address_names, 1)]);
    END LOOP;
` + emitCollected

// Install creates (or updates) the event triggers and their functions on
// conn's database; see the package documentation. It is idempotent. A
// user without the privilege gets an error matching ErrNotPermitted.
func Install(ctx context.Context, conn Conn) error {
	if err := CheckPermitted(ctx, conn); err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("install the DDL capture trigger: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	stmts := []string{
		`SELECT pg_catalog.pg_advisory_xact_lock(` + fmt.Sprint(installLock) + `)`,
		`CREATE SCHEMA IF NOT EXISTS ` + Schema,
		keySQL, tableStateSQL, emitSQL, commandEndSQL, sqlDropSQL,
		`COMMENT ON FUNCTION ` + stateFunction + `(oid, text) IS '` + version + `'`,
	}
	for i, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("install the DDL capture trigger: %w", err)
		}
		if i == 0 {
			// Before anything is created or replaced: CREATE SCHEMA IF NOT
			// EXISTS and CREATE OR REPLACE FUNCTION keep another role's
			// objects, and their owner.
			if err := ownership.Check(ctx, tx); err != nil {
				return fmt.Errorf("install the DDL capture trigger: %w", err)
			}
		}
	}
	triggers := []struct{ name, event, tags, fn string }{
		{CommandEndTrigger, "ddl_command_end", `'ALTER TABLE', 'CREATE INDEX', 'ALTER INDEX'`, commandEndFunction},
		{SQLDropTrigger, "sql_drop", `'ALTER TABLE', 'DROP INDEX'`, sqlDropFunction},
	}
	for _, t := range triggers {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = $1)`, t.name).Scan(&exists); err != nil {
			return fmt.Errorf("install the DDL capture trigger: look up event trigger %s: %w", t.name, err)
		}
		if exists {
			continue
		}
		stmt := fmt.Sprintf(`CREATE EVENT TRIGGER %s ON %s WHEN TAG IN (%s) EXECUTE FUNCTION %s()`, t.name, t.event, t.tags, t.fn)
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("install the DDL capture trigger: %w", err)
		}
	}
	// Again, in the same transaction: an object created meanwhile by
	// another role was kept by IF NOT EXISTS.
	if err := ownership.Check(ctx, tx); err != nil {
		return fmt.Errorf("install the DDL capture trigger: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("install the DDL capture trigger: commit: %w", err)
	}
	return nil
}

// version marks the functions Install creates (a comment on the state
// function): a source whose functions carry another mark was installed by
// an older pgmirror, and Install updates them.
const version = "pgmirror DDL capture 4"

// Installed reports whether both event triggers and the signing key exist
// on conn's database, and whether the functions are this version's
// (current; when not, Install updates them).
func Installed(ctx context.Context, conn Conn) (installed, current bool, err error) {
	var n int
	var key bool
	var mark *string
	err = conn.QueryRow(ctx, `SELECT count(*), pg_catalog.to_regclass($3) IS NOT NULL,
			pg_catalog.obj_description(pg_catalog.to_regprocedure($4), 'pg_proc')
		FROM pg_catalog.pg_event_trigger WHERE evtname IN ($1, $2)`,
		CommandEndTrigger, SQLDropTrigger, keyTable, stateFunction+"(oid, text)").Scan(&n, &key, &mark)
	if err != nil {
		return false, false, fmt.Errorf("look up the DDL capture trigger: %w", err)
	}
	installed = n == 2 && key
	return installed, installed && mark != nil && *mark == version, nil
}

// Remove drops the event triggers and their functions from conn's database
// (the schema _pgmirror stays). It is idempotent.
func Remove(ctx context.Context, conn Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("remove the DDL capture trigger: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	for _, s := range []string{
		`SELECT pg_catalog.pg_advisory_xact_lock(` + fmt.Sprint(installLock) + `)`,
		`DROP EVENT TRIGGER IF EXISTS ` + CommandEndTrigger,
		`DROP EVENT TRIGGER IF EXISTS ` + SQLDropTrigger,
		`DROP FUNCTION IF EXISTS ` + commandEndFunction + `()`,
		`DROP FUNCTION IF EXISTS ` + sqlDropFunction + `()`,
		`DROP FUNCTION IF EXISTS ` + stateFunction + `(oid, text)`,
		`DROP FUNCTION IF EXISTS ` + emitFunction + `(jsonb)`,
		`DROP TABLE IF EXISTS ` + keyTable,
	} {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("remove the DDL capture trigger: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("remove the DDL capture trigger: commit: %w", err)
	}
	return nil
}

// ReadKey returns the key that signs the messages of the trigger on conn's
// database (see Open). The trigger's owner and superusers may read it; a
// database without the trigger gives an error. So does a key (or another
// object of _pgmirror, or the trigger's functions) owned by a role other
// than the peer's user that is not a superuser (ownership.Check): that
// role could sign messages of its own.
func ReadKey(ctx context.Context, conn Conn) (string, error) {
	if err := ownership.Check(ctx, conn); err != nil {
		return "", fmt.Errorf("read the key of the DDL capture trigger: %w", err)
	}
	var key string
	if err := conn.QueryRow(ctx, `SELECT key FROM `+keyTable+` LIMIT 1`).Scan(&key); err != nil {
		return "", fmt.Errorf("read the key of the DDL capture trigger: %w", err)
	}
	return key, nil
}

// SlotsInDatabase returns those of slots that are replication slots of
// conn's database: the mirrors reading them share the database's trigger,
// even when their peers name the database differently from the caller's.
func SlotsInDatabase(ctx context.Context, conn Conn, slots []string) ([]string, error) {
	if len(slots) == 0 {
		return nil, nil
	}
	var found []string
	err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(slot_name::text ORDER BY slot_name), '{}')
		FROM pg_catalog.pg_replication_slots
		WHERE database = pg_catalog.current_database() AND slot_name = ANY($1::text[])`, slots).Scan(&found)
	if err != nil {
		return nil, fmt.Errorf("look up the replication slots of other mirrors on the source database: %w", err)
	}
	return found, nil
}
