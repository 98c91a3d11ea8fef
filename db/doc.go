// Package db is pgmirror's catalog on PostgreSQL through pgx.
//
// The catalog holds users (with the token version that revokes their API
// tokens), peers, mirrors, their table mappings with per-table status and
// counters, structured mirror logs, service-wide settings, failed logins
// (for throttling) and the audit log of API changes; River's job tables live
// beside them. Its schema is the goose
// migrations in package migrations; [Migrate] applies them and River's own
// migrations under one session advisory lock, so any number of replicas may
// start at the same moment.
//
// A [Store] wraps a pgxpool.Pool. Its methods are named entity first
// (PeerCreate, MirrorGetByName, LogInsert) and return [ErrNotFound] or
// [ErrConflict] (wrapped) where a row is missing or a unique or foreign key
// constraint rejects a write; every other error is wrapped with what the
// store was doing. Methods that must run in a caller's transaction (so that
// a River job can be enqueued with InsertTx in the same commit) take a pgx.Tx.
//
// Secrets (peer passwords and CA certificates, the generated JWT secret) are
// stored encrypted with the Store's keyring (package db/secretbox). A [Peer]
// keeps them encrypted; [Peer.ConnConfig] decrypts them only when a
// connection to the peer is about to be opened. [Store.EncryptSecrets]
// encrypts clear-text rows of older versions and moves values to the
// current key.
//
// Callers name their variables store, pool and tx, never db.
package db
