-- +goose Up
-- A peer that refuses pgmirror's connections (a changed password, a role
-- made NOLOGIN, a revoked CONNECT): the slot monitor records the
-- database's message when it starts and deletes the row once a connection
-- works again. Mirrors using the peer show it (peer_warnings) while their
-- replication, on connections opened before, may still run.
CREATE TABLE peer_problems (
    peer_id    bigint PRIMARY KEY REFERENCES peers (id) ON DELETE CASCADE,
    message    text NOT NULL CHECK (message <> ''),
    sqlstate   text,
    since      timestamptz NOT NULL DEFAULT now(),
    checked_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE peer_problems IS 'Peers whose last connection attempt by the slot monitor was refused, with the database''s message (never a password) and since when; no row when the peer accepts connections.';

-- What would keep a cut-over from creating a reverse mirror from the
-- destination back to the source, as a verification found it.
ALTER TABLE verifications ADD COLUMN reverse_mirror_problems jsonb
    CHECK (jsonb_typeof(reverse_mirror_problems) = 'array');
COMMENT ON COLUMN verifications.reverse_mirror_problems IS 'What would keep a cut-over from creating a reverse mirror (destination back to source), as this verification found it: an array of messages, [] when nothing, NULL when not checked.';

-- +goose Down
ALTER TABLE verifications DROP COLUMN reverse_mirror_problems;
DROP TABLE peer_problems;
