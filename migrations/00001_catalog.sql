-- +goose Up
-- The pgmirror catalog. Constraints live here so that psql shows the truth
-- and rejects nonsense; docs/catalog.md explains every table for operators.

CREATE TABLE settings (
    key        text PRIMARY KEY,
    value      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE settings IS 'Service-wide settings shared by every replica (for example the generated JWT secret).';

CREATE TABLE users (
    id            bigserial PRIMARY KEY,
    username      text NOT NULL UNIQUE CHECK (length(username) BETWEEN 1 AND 128),
    password_hash text NOT NULL,
    role          text NOT NULL CHECK (role IN ('admin', 'viewer')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE users IS 'API accounts; passwords are bcrypt hashes.';

CREATE TABLE peers (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 128),
    host       text NOT NULL CHECK (host <> ''),
    port       integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    "user"     text NOT NULL CHECK ("user" <> ''),
    password   text NOT NULL,
    database   text NOT NULL CHECK (database <> ''),
    ssl_mode   text NOT NULL DEFAULT 'prefer'
               CHECK (ssl_mode IN ('disable', 'require', 'verify-ca', 'verify-full', 'prefer')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE peers IS 'PostgreSQL databases that mirrors read from or write to. password is write-only through the API.';

CREATE TABLE mirrors (
    id                              bigserial PRIMARY KEY,
    -- uid identifies the mirror on the destination (_pgmirror.applied) even
    -- when another catalog uses the same name.
    uid                             uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    name                            text NOT NULL CHECK (length(name) BETWEEN 1 AND 128),
    source_peer_id                  bigint NOT NULL REFERENCES peers (id) ON DELETE RESTRICT,
    destination_peer_id             bigint NOT NULL REFERENCES peers (id) ON DELETE RESTRICT,
    snapshot_num_rows_per_partition integer NOT NULL DEFAULT 500000 CHECK (snapshot_num_rows_per_partition BETWEEN 1 AND 100000000),
    snapshot_max_parallel_workers   integer NOT NULL DEFAULT 4 CHECK (snapshot_max_parallel_workers BETWEEN 1 AND 64),
    snapshot_num_tables_in_parallel integer NOT NULL DEFAULT 4 CHECK (snapshot_num_tables_in_parallel BETWEEN 1 AND 64),
    cdc_sync_interval_seconds       integer NOT NULL DEFAULT 60 CHECK (cdc_sync_interval_seconds BETWEEN 1 AND 86400),
    cdc_batch_size                  integer NOT NULL DEFAULT 10000 CHECK (cdc_batch_size BETWEEN 1 AND 1000000),
    do_initial_snapshot             boolean NOT NULL DEFAULT true,
    publication_name                text NOT NULL CHECK (publication_name ~ '^[a-z_][a-z0-9_]{0,62}$'),
    replication_slot_name           text NOT NULL CHECK (replication_slot_name ~ '^[a-z0-9_]{1,63}$'),
    -- Whether this mirror created the publication / slot (and so drops them on delete).
    created_publication             boolean NOT NULL DEFAULT false,
    created_slot                    boolean NOT NULL DEFAULT false,
    status                          text NOT NULL DEFAULT 'initializing'
                                    CHECK (status IN ('initializing', 'snapshotting', 'running', 'paused', 'error', 'stopped')),
    -- desired_state is written by the API; the worker running the mirror follows it.
    desired_state                   text NOT NULL DEFAULT 'running' CHECK (desired_state IN ('running', 'paused')),
    -- resume_status is the status a failed mirror returns to after a successful retry.
    resume_status                   text CHECK (resume_status IN ('initializing', 'snapshotting', 'running')),
    -- pending_action is a control request written by the API (POST resync,
    -- POST sync-schema) that the worker running the mirror carries out and clears.
    pending_action                  text CHECK (pending_action IN ('resync', 'sync_schema')),
    error_message                   text,
    error_count                     integer NOT NULL DEFAULT 0 CHECK (error_count >= 0),
    next_retry_at                   timestamptz,
    last_lsn                        pg_lsn,
    last_sync_batch_id              bigint NOT NULL DEFAULT 0,
    -- Set by DELETE /v1/mirrors/{name}: the mirror is gone from the API and a
    -- cleanup job drops its slot and publication, then the row.
    deleted_at                      timestamptz,
    created_at                      timestamptz NOT NULL DEFAULT now(),
    updated_at                      timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'error' OR error_message IS NOT NULL)
);
CREATE UNIQUE INDEX mirrors_name_live ON mirrors (name) WHERE deleted_at IS NULL;
CREATE INDEX mirrors_source_peer ON mirrors (source_peer_id);
CREATE INDEX mirrors_destination_peer ON mirrors (destination_peer_id);
COMMENT ON TABLE mirrors IS 'One row per mirror: configuration, desired state and observed status.';

CREATE TABLE mirror_tables (
    id                 bigserial PRIMARY KEY,
    mirror_id          bigint NOT NULL REFERENCES mirrors (id) ON DELETE CASCADE,
    position           integer NOT NULL DEFAULT 0,
    source_schema      text NOT NULL CHECK (source_schema <> ''),
    source_table       text NOT NULL CHECK (source_table <> ''),
    destination_schema text NOT NULL CHECK (destination_schema <> ''),
    destination_table  text NOT NULL CHECK (destination_table <> ''),
    exclude_columns    text[] NOT NULL DEFAULT '{}',
    status             text NOT NULL DEFAULT 'pending'
                       CHECK (status IN ('pending', 'snapshotting', 'running', 'error')),
    -- resync_requested_at is set by POST /resync/{table}; the worker clears it.
    resync_requested_at timestamptz,
    rows_synced        bigint NOT NULL DEFAULT 0,
    rows_inserted      bigint NOT NULL DEFAULT 0,
    rows_updated       bigint NOT NULL DEFAULT 0,
    rows_deleted       bigint NOT NULL DEFAULT 0,
    last_synced_at     timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (mirror_id, source_schema, source_table),
    UNIQUE (mirror_id, destination_schema, destination_table)
);
COMMENT ON TABLE mirror_tables IS 'Table mappings of each mirror with per-table status and counters.';

CREATE TABLE mirror_logs (
    id         bigserial PRIMARY KEY,
    mirror_id  bigint NOT NULL REFERENCES mirrors (id) ON DELETE CASCADE,
    level      text NOT NULL CHECK (level IN ('INFO', 'WARN', 'ERROR', 'DEBUG')),
    message    text NOT NULL,
    details    jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mirror_logs_mirror_id ON mirror_logs (mirror_id, id DESC);
CREATE INDEX mirror_logs_created_at ON mirror_logs (created_at);
COMMENT ON TABLE mirror_logs IS 'Structured log entries per mirror, newest first through the API.';

-- +goose StatementBegin
CREATE FUNCTION pgmirror_touch_updated_at() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER users_touch BEFORE UPDATE ON users FOR EACH ROW EXECUTE FUNCTION pgmirror_touch_updated_at();
CREATE TRIGGER peers_touch BEFORE UPDATE ON peers FOR EACH ROW EXECUTE FUNCTION pgmirror_touch_updated_at();
CREATE TRIGGER mirrors_touch BEFORE UPDATE ON mirrors FOR EACH ROW EXECUTE FUNCTION pgmirror_touch_updated_at();
CREATE TRIGGER mirror_tables_touch BEFORE UPDATE ON mirror_tables FOR EACH ROW EXECUTE FUNCTION pgmirror_touch_updated_at();

-- Legal mirror status transitions (docs/status.md draws them). Staying in the
-- same status is always allowed; stopped is terminal.
-- +goose StatementBegin
CREATE FUNCTION pgmirror_check_mirror_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.status = 'initializing' AND NEW.status IN ('snapshotting', 'running', 'error', 'stopped')) OR
        (OLD.status = 'snapshotting' AND NEW.status IN ('running', 'error', 'stopped')) OR
        (OLD.status = 'running'      AND NEW.status IN ('paused', 'snapshotting', 'initializing', 'error', 'stopped')) OR
        (OLD.status = 'paused'       AND NEW.status IN ('running', 'snapshotting', 'initializing', 'error', 'stopped')) OR
        (OLD.status = 'error'        AND NEW.status IN ('initializing', 'snapshotting', 'running', 'paused', 'stopped'))
    ) THEN
        RAISE EXCEPTION 'illegal mirror status transition from % to %', OLD.status, NEW.status
            USING ERRCODE = 'check_violation', TABLE = 'mirrors', CONSTRAINT = 'mirrors_status_transition';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER mirrors_status_transition BEFORE UPDATE OF status ON mirrors FOR EACH ROW EXECUTE FUNCTION pgmirror_check_mirror_status();

-- Wake the worker running a mirror when its desired state changes (pause,
-- resume, delete, or a control request on one of its tables).
-- +goose StatementBegin
CREATE FUNCTION pgmirror_notify_mirror_control() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgmirror_mirror_control', NEW.id::text);
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER mirrors_notify_control AFTER UPDATE OF desired_state, deleted_at, pending_action ON mirrors
    FOR EACH ROW WHEN (OLD.desired_state IS DISTINCT FROM NEW.desired_state
                       OR OLD.deleted_at IS DISTINCT FROM NEW.deleted_at
                       OR (NEW.pending_action IS NOT NULL AND OLD.pending_action IS DISTINCT FROM NEW.pending_action))
    EXECUTE FUNCTION pgmirror_notify_mirror_control();

-- +goose StatementBegin
CREATE FUNCTION pgmirror_notify_table_control() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgmirror_mirror_control', NEW.mirror_id::text);
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER mirror_tables_notify_control AFTER UPDATE OF resync_requested_at ON mirror_tables
    FOR EACH ROW WHEN (NEW.resync_requested_at IS NOT NULL AND OLD.resync_requested_at IS DISTINCT FROM NEW.resync_requested_at)
    EXECUTE FUNCTION pgmirror_notify_table_control();

-- +goose Down
DROP TABLE mirror_logs;
DROP TABLE mirror_tables;
DROP TABLE mirrors;
DROP TABLE peers;
DROP TABLE users;
DROP TABLE settings;
DROP FUNCTION pgmirror_notify_table_control();
DROP FUNCTION pgmirror_notify_mirror_control();
DROP FUNCTION pgmirror_check_mirror_status();
DROP FUNCTION pgmirror_touch_updated_at();
