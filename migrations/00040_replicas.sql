-- +goose Up
-- The pgmirror processes (replicas) serving this catalog. Each holds the
-- session advisory locks of the mirrors it runs on one catalog connection,
-- whose backend pid is lock_pid, and reports every few seconds (seen_at):
-- a mirror's worker is the replica whose lock connection holds its lock.
CREATE TABLE replicas (
    name           text PRIMARY KEY,
    lock_pid       integer,
    mirror_workers integer NOT NULL CHECK (mirror_workers > 0),
    running        integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    started_at     timestamptz NOT NULL DEFAULT now(),
    seen_at        timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE replicas IS 'pgmirror processes serving this catalog, each reporting every few seconds (see docs/status.md).';
COMMENT ON COLUMN replicas.lock_pid IS 'Backend pid of the catalog connection holding the mirror locks of the replica (pg_locks.pid).';
COMMENT ON COLUMN replicas.running IS 'Mirrors the replica ran at its last report.';

-- +goose Down
DROP TABLE replicas;
