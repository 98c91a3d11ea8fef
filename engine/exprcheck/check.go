package exprcheck

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier runs catalog queries on the source; *pgx.Conn, *pgxpool.Pool and
// pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// firstNormalOID is FirstNormalObjectId: objects with a lower OID were made
// by initdb.
const firstNormalOID = 16384

// Checker checks expressions against the catalog of the database they were
// read from. It remembers what it looked up, so one Checker serves many
// expressions of one database; it is not safe for concurrent use.
type Checker struct {
	q     Querier
	funcs map[uint32]string
	ops   map[uint32]string
	types map[uint32]string
}

// New returns a Checker that looks OIDs up through q.
func New(q Querier) *Checker {
	return &Checker{q: q, funcs: map[uint32]string{}, ops: map[uint32]string{}, types: map[uint32]string{}}
}

// Refs are the OIDs an expression's node tree names.
type Refs struct {
	Funcs, Ops, Types []uint32
}

var (
	scalarRE = regexp.MustCompile(`:([A-Za-z_]+) (\d+)`)
	listRE   = regexp.MustCompile(`:([A-Za-z_]+) \(o ([0-9 ]+)\)`)
)

// Parse extracts the functions, operators and types that a node tree (the
// text form of pg_node_tree) names. Columns' own types (:vartype) are left
// out: reading a column runs nothing.
func Parse(tree string) Refs {
	var r Refs
	add := func(key string, oid uint64) {
		if oid == 0 {
			return
		}
		o := uint32(oid)
		switch {
		case key == "funcid" || key == "opfuncid" || key == "aggfnoid" || key == "winfnoid" ||
			key == "hashfuncid" || key == "negfuncid":
			if !slices.Contains(r.Funcs, o) {
				r.Funcs = append(r.Funcs, o)
			}
		case key == "opno" || key == "opnos":
			if !slices.Contains(r.Ops, o) {
				r.Ops = append(r.Ops, o)
			}
		case key == "vartype":
		case strings.HasSuffix(key, "type") || strings.HasSuffix(key, "typeid") || strings.HasSuffix(key, "typid"):
			if !slices.Contains(r.Types, o) {
				r.Types = append(r.Types, o)
			}
		}
	}
	for _, m := range scalarRE.FindAllStringSubmatch(tree, -1) {
		if n, err := strconv.ParseUint(m[2], 10, 32); err == nil {
			add(m[1], n)
		}
	}
	for _, m := range listRE.FindAllStringSubmatch(tree, -1) {
		for _, f := range strings.Fields(m[2]) {
			if n, err := strconv.ParseUint(f, 10, 32); err == nil {
				add(m[1], n)
			}
		}
	}
	return r
}

// Check returns "" when every function, operator and type that the node
// trees name may be evaluated by a privileged role, and otherwise why not,
// naming the first object that fails (for a log line: "calls
// public.f(integer), which is not a built-in function"). Empty trees pass.
func (c *Checker) Check(ctx context.Context, trees ...string) (string, error) {
	for _, tree := range trees {
		r := Parse(tree)
		for _, o := range r.Ops {
			if reason, err := c.operator(ctx, o); err != nil || reason != "" {
				return reason, err
			}
		}
		for _, f := range r.Funcs {
			if reason, err := c.function(ctx, f); err != nil || reason != "" {
				return reason, err
			}
		}
		for _, t := range r.Types {
			if reason, err := c.typ(ctx, t); err != nil || reason != "" {
				return reason, err
			}
		}
	}
	return "", nil
}

// function checks one function.
func (c *Checker) function(ctx context.Context, oid uint32) (string, error) {
	if reason, ok := c.funcs[oid]; ok {
		return reason, nil
	}
	var name, schema, signature string
	var volatility byte
	err := c.q.QueryRow(ctx, `SELECT p.proname::text, n.nspname::text, p.oid::pg_catalog.regprocedure::text, p.provolatile
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = $1`, oid).Scan(&name, &schema, &signature, &volatility)
	var reason string
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		reason = fmt.Sprintf("calls a function (OID %d) that no longer exists on the source", oid)
	case err != nil:
		return "", fmt.Errorf("look up function %d: %w", oid, err)
	case schema != "pg_catalog" || oid >= firstNormalOID:
		if !strings.Contains(signature, ".") {
			signature = schema + "." + signature
		}
		reason = fmt.Sprintf("calls %s, which is not a built-in function", signature)
	case denied(name):
		reason = fmt.Sprintf("calls %s, a built-in function that runs SQL or reaches the server", signature)
	case volatility != 'i' && !allowed[name]:
		reason = fmt.Sprintf("calls %s, a %s built-in function that is not on pgmirror's allow-list", signature, volatilityName(volatility))
	}
	c.funcs[oid] = reason
	return reason, nil
}

func volatilityName(v byte) string {
	switch v {
	case 's':
		return "stable"
	case 'v':
		return "volatile"
	}
	return "immutable"
}

// operator checks one operator and the function behind it.
func (c *Checker) operator(ctx context.Context, oid uint32) (string, error) {
	if reason, ok := c.ops[oid]; ok {
		return reason, nil
	}
	var name, schema string
	var code uint32
	err := c.q.QueryRow(ctx, `SELECT o.oprname::text, n.nspname::text, o.oprcode::oid
FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace WHERE o.oid = $1`, oid).Scan(&name, &schema, &code)
	var reason string
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		reason = fmt.Sprintf("uses an operator (OID %d) that no longer exists on the source", oid)
	case err != nil:
		return "", fmt.Errorf("look up operator %d: %w", oid, err)
	case schema != "pg_catalog" || oid >= firstNormalOID:
		reason = fmt.Sprintf("uses operator %s.%s, which is not a built-in operator", schema, name)
	default:
		if reason, err = c.function(ctx, code); err != nil {
			return "", err
		}
		if reason != "" {
			reason = fmt.Sprintf("uses operator %s, which %s", name, reason)
		}
	}
	c.ops[oid] = reason
	return reason, nil
}

// typ checks a type that an expression produces or casts to: a domain's
// constraints and default run when a value is cast to it.
func (c *Checker) typ(ctx context.Context, oid uint32) (string, error) {
	if reason, ok := c.types[oid]; ok {
		return reason, nil
	}
	if oid < firstNormalOID {
		return "", nil // built-in types: their I/O and casts are built in
	}
	c.types[oid] = "" // cycles (a composite naming itself through an array) end here
	reason, err := c.loadType(ctx, oid)
	if err != nil {
		delete(c.types, oid)
		return "", err
	}
	c.types[oid] = reason
	return reason, nil
}

func (c *Checker) loadType(ctx context.Context, oid uint32) (string, error) {
	var name, defaultTree string
	var kind byte
	var elem, base, relid, subtype, canonical, subdiff, rangeOf uint32
	var checks []string
	err := c.q.QueryRow(ctx, `SELECT t.oid::pg_catalog.regtype::text, t.typtype, t.typelem, t.typbasetype, t.typrelid,
       COALESCE(t.typdefaultbin::text, ''),
       COALESCE(r.rngsubtype, 0), COALESCE(r.rngcanonical::oid, 0), COALESCE(r.rngsubdiff::oid, 0),
       COALESCE((SELECT mr.rngtypid FROM pg_catalog.pg_range mr WHERE mr.rngmultitypid = t.oid), 0),
       ARRAY(SELECT k.conbin::text FROM pg_catalog.pg_constraint k WHERE k.contypid = t.oid AND k.contype = 'c' AND k.conbin IS NOT NULL)
FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_range r ON r.rngtypid = t.oid WHERE t.oid = $1`, oid).Scan(
		&name, &kind, &elem, &base, &relid, &defaultTree, &subtype, &canonical, &subdiff, &rangeOf, &checks)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Sprintf("uses a type (OID %d) that no longer exists on the source", oid), nil
	}
	if err != nil {
		return "", fmt.Errorf("look up type %d: %w", oid, err)
	}
	wrap := func(reason string) string {
		if reason == "" {
			return ""
		}
		return fmt.Sprintf("uses type %s, which %s", name, reason)
	}
	if kind == 'd' {
		reason, err := c.Check(ctx, append(checks, defaultTree)...)
		if err != nil || reason != "" {
			return wrap(reason), err
		}
	}
	for _, f := range []uint32{canonical, subdiff} {
		if f == 0 {
			continue
		}
		if reason, err := c.function(ctx, f); err != nil || reason != "" {
			return wrap(reason), err
		}
	}
	deps := []uint32{elem, base, subtype, rangeOf}
	if relid != 0 {
		rows, err := c.q.Query(ctx, `SELECT atttypid FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, relid)
		if err != nil {
			return "", fmt.Errorf("look up attributes of type %s: %w", name, err)
		}
		attrs, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
		if err != nil {
			return "", fmt.Errorf("look up attributes of type %s: %w", name, err)
		}
		deps = append(deps, attrs...)
	}
	for _, d := range deps {
		if d == 0 {
			continue
		}
		if reason, err := c.typ(ctx, d); err != nil || reason != "" {
			return wrap(reason), err
		}
	}
	return "", nil
}

// allowed are the non-immutable built-in functions that expressions may
// call: clocks, sequences, random values and the session's identity, and
// the stable date and time conversions that depend on TimeZone or
// DateStyle, and the text of values of any type. None of them runs SQL or
// user code.
var allowed = map[string]bool{
	// clocks
	"now": true, "statement_timestamp": true, "transaction_timestamp": true, "clock_timestamp": true, "timeofday": true,
	// sequences (nextval('s'::regclass) in serial and identity-like defaults)
	"nextval": true, "currval": true,
	// random values
	"random": true, "random_normal": true, "gen_random_uuid": true, "uuidv4": true, "uuidv7": true,
	// who and where
	"current_user": true, "session_user": true, "current_role": true, "user": true,
	"current_database": true, "current_schema": true, "current_schemas": true,
	// date and time conversions and arithmetic that depend on TimeZone/DateStyle
	"date": true, "timestamp": true, "timestamptz": true, "time": true, "timetz": true,
	"date_trunc": true, "date_part": true, "extract": true, "date_bin": true, "to_char": true, "to_timestamp": true, "to_date": true,
	"age": true, "timezone": true, "date_add": true, "date_subtract": true, "timestamptz_pl_interval": true, "timestamptz_mi_interval": true,
	// text of values of any type (stable: they call the types' output
	// functions, which only a superuser can write): text || 1, concat(...)
	"textanycat": true, "anytextcat": true, "concat": true, "concat_ws": true, "format": true,
	"array_to_string": true, "to_json": true, "to_jsonb": true,
}

// deniedNames and deniedPrefixes are built-in functions never carried,
// whatever their volatility: they run SQL given as text, or reach the
// server, its files, its settings or other sessions.
var (
	deniedNames = map[string]bool{
		"query_to_xml": true, "query_to_xmlschema": true, "query_to_xml_and_xmlschema": true,
		"cursor_to_xml": true, "cursor_to_xmlschema": true,
		"table_to_xml": true, "table_to_xmlschema": true, "table_to_xml_and_xmlschema": true,
		"schema_to_xml": true, "schema_to_xmlschema": true, "schema_to_xml_and_xmlschema": true,
		"database_to_xml": true, "database_to_xmlschema": true, "database_to_xml_and_xmlschema": true,
		"ts_stat": true, "loread": true, "lowrite": true, "set_config": true, "current_setting": true,
		"pg_reload_conf": true, "pg_rotate_logfile": true, "pg_stat_file": true, "pg_notify": true,
		"pg_switch_wal": true, "pg_promote": true, "pg_logical_emit_message": true, "pg_import_system_collations": true,
		"txid_current": true, "pg_current_xact_id": true, "pg_log_backend_memory_contexts": true,
	}
	deniedPrefixes = []string{"lo_", "pg_read_", "pg_ls_", "pg_file", "dblink", "pg_sleep", "pg_advisory", "pg_try_advisory",
		"pg_create_", "pg_drop_", "pg_replication_", "pg_logical_", "pg_copy_", "pg_backup_", "pg_start_", "pg_stop_", "pg_wal_"}
)

func denied(name string) bool {
	if deniedNames[name] || strings.HasSuffix(name, "_backend") {
		return true
	}
	for _, p := range deniedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
