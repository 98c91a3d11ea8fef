// Package ddl captures schema changes of source tables with an event
// trigger and reconciles destination tables with them, in order with the
// replicated rows.
//
// # Capture
//
// Install creates, in the source database's schema _pgmirror, two event
// trigger functions and their event triggers, shared by every mirror that
// reads the database (Remove drops them with the last such mirror):
//
//   - pgmirror_ddl_command_end fires at the end of ALTER TABLE, CREATE INDEX
//     and ALTER INDEX. For each table the command touched it writes, with
//     pg_logical_emit_message(true, 'pgmirror_ddl', ...), a transactional
//     logical decoding message describing the table's resulting state
//     (a State): its indexes other than the primary key's and those backing
//     constraints, its check, unique and exclusion constraints, and its
//     columns' NOT NULL flags and defaults. The payload is the state, not
//     the SQL text, so pgmirror never parses SQL.
//   - pgmirror_ddl_sql_drop fires when DROP INDEX or ALTER TABLE drops an
//     index or a table constraint and writes one message per dropped object
//     (a Drop).
//
// Every message is signed (see Open) with a key kept in a table that only
// the trigger's owner and superusers can read (ReadKey), and names the
// transaction that wrote it: anyone may call pg_logical_emit_message with
// pgmirror's prefix, and such a message must never reach the destination.
//
// The messages are decoded by every slot of the database where they were
// written, inside their transaction (engine/capture turns them into
// change.OpSchema changes); each mirror filters them by the tables it
// maps. The functions catch their own errors: a failure to describe a
// table never makes the user's DDL fail (it raises a WARNING instead).
//
// # Reconcile
//
// Reconcile brings a destination table to the state a message describes:
// it compares the message with the destination's catalog and executes only
// what differs, so a message applied twice changes nothing the second time.
// The state carries the node trees of its expressions; Message.Screen
// checks them (engine/exprcheck) and marks those that may not run with the
// destination role's privileges, which Plan leaves out.
// Foreign keys are not part of it (a cut-over creates them).
package ddl
