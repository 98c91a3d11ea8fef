// Package preflight checks that a source database can feed a mirror before
// pgmirror creates anything on it.
//
// Each check is a small [NamedCheck]: [WalLevel] (the server runs with
// wal_level=logical), [TablesExist] (every mapped table is there, as a table)
// and [ReplicaIdentity] (every mapped table can identify its rows in UPDATE and
// DELETE: a primary key, a replica identity index, or REPLICA IDENTITY FULL;
// for a partitioned table, the root's primary key or every leaf partition's
// identity). [Check] runs them (the list is [All]) in that order and stops at the first failure.
// [CheckAs] runs them on a database in another role (a cut-over's reverse
// mirror reads the destination): the messages then name that database.
//
// A failed check returns a [*Failure], whose text is meant for users: it
// names the table (schema.table) and says what to do. Any other error means
// the source could not be queried.
package preflight
