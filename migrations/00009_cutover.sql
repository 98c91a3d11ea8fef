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

-- +goose Down
ALTER TABLE mirrors DROP COLUMN cutover;
UPDATE mirrors SET status = 'stopped' WHERE status = 'completed';
UPDATE mirrors SET pending_action = NULL WHERE pending_action = 'cutover';
ALTER TABLE mirrors DROP CONSTRAINT mirrors_pending_action_check,
    ADD CONSTRAINT mirrors_pending_action_check CHECK (pending_action IN ('resync', 'sync_schema'));
ALTER TABLE mirrors DROP CONSTRAINT mirrors_status_check,
    ADD CONSTRAINT mirrors_status_check
        CHECK (status IN ('initializing', 'snapshotting', 'running', 'paused', 'error', 'stopped'));
