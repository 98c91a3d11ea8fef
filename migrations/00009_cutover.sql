-- +goose Up
-- A cut-over (POST /v1/mirrors/{name}/cutover) is a pending action that the
-- mirror's worker carries out step by step; a mirror whose cut-over
-- succeeded ends in the final status 'completed'.
ALTER TABLE mirrors DROP CONSTRAINT mirrors_status_check,
    ADD CONSTRAINT mirrors_status_check
        CHECK (status IN ('initializing', 'snapshotting', 'running', 'paused', 'error', 'stopped', 'completed'));
ALTER TABLE mirrors DROP CONSTRAINT mirrors_pending_action_check,
    ADD CONSTRAINT mirrors_pending_action_check CHECK (pending_action IN ('resync', 'sync_schema', 'cutover'));
ALTER TABLE mirrors ADD COLUMN cutover jsonb CHECK (cutover IS NULL OR jsonb_typeof(cutover) = 'object');
COMMENT ON COLUMN mirrors.cutover IS 'The last cut-over: its options, state (requested, running, completed, failed), steps with their times, and error; NULL before the first (see docs/operations.md).';

-- Legal transitions (docs/status.md): as before, plus running -> completed
-- (a cut-over); completed is terminal like stopped.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgmirror_check_mirror_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF NOT (
        (OLD.status = 'initializing' AND NEW.status IN ('snapshotting', 'running', 'error', 'stopped')) OR
        (OLD.status = 'snapshotting' AND NEW.status IN ('running', 'error', 'stopped')) OR
        (OLD.status = 'running'      AND NEW.status IN ('paused', 'snapshotting', 'initializing', 'error', 'stopped', 'completed')) OR
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

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgmirror_check_mirror_status() RETURNS trigger LANGUAGE plpgsql AS $$
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
ALTER TABLE mirrors DROP COLUMN cutover;
UPDATE mirrors SET status = 'stopped' WHERE status = 'completed';
UPDATE mirrors SET pending_action = NULL WHERE pending_action = 'cutover';
ALTER TABLE mirrors DROP CONSTRAINT mirrors_pending_action_check,
    ADD CONSTRAINT mirrors_pending_action_check CHECK (pending_action IN ('resync', 'sync_schema'));
ALTER TABLE mirrors DROP CONSTRAINT mirrors_status_check,
    ADD CONSTRAINT mirrors_status_check
        CHECK (status IN ('initializing', 'snapshotting', 'running', 'paused', 'error', 'stopped'));
