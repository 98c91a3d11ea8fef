// Package exprcheck decides whether an expression that a database user
// wrote on the source (a CHECK constraint, a column default, a generated
// column, an index expression or predicate, an exclusion constraint, a
// domain's CHECK) may be created on the destination, where pgmirror's
// destination role (often a superuser) would evaluate it: when it creates
// the object (a CHECK validates the rows, CREATE INDEX computes every
// row's key) and at every row it writes afterwards.
//
// PostgreSQL stores such expressions as node trees (pg_constraint.conbin,
// pg_attrdef.adbin, pg_index.indexprs and indpred, pg_type.typdefaultbin);
// their text form names every function (:funcid, :opfuncid, :aggfnoid,
// :winfnoid), operator (:opno, :opnos) and type (:resulttype, :consttype,
// ...) they use by OID. A Checker reads those OIDs and looks each one up in
// the source's catalog. An expression is carried only when every function
// it calls, directly or through an operator, is a built-in function of
// pg_catalog (OID below FirstNormalObjectId, so no user and no extension
// made it) that
//
//   - is not on the deny list: functions that run SQL given as text
//     (query_to_xml, cursor_to_xml, table_to_xml, schema_to_xml,
//     database_to_xml and their variants, ts_stat) or that reach the server,
//     its files or other sessions (lo_*, pg_read_*, pg_ls_*, pg_file_*,
//     pg_stat_file, set_config, pg_*_backend, dblink*, pg_sleep*, pg_notify,
//     advisory locks, ...), and
//   - is IMMUTABLE, or is one of a short list of non-immutable built-ins
//     that column defaults commonly use and that run no user code
//     (now, clock_timestamp, nextval, gen_random_uuid, random,
//     current_user, date_trunc, to_char, ...; see allowed).
//
// Every operator must be a built-in operator of pg_catalog whose function
// passes the same rule. Every type the expression produces or casts to
// must pass too: a domain's CHECK constraints and default (which a cast to
// it evaluates), a composite type's attributes, an array's element type and
// a range type's subtype and functions are checked in turn.
//
// Functions outside pg_catalog are never carried, whatever they are
// declared: an IMMUTABLE plpgsql function may do anything, and the name
// printed in the expression would be resolved again on the destination,
// where another role may have created a function of that name.
package exprcheck
