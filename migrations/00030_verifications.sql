-- +goose Up
-- Verifications (POST /v1/mirrors/{name}/verify): one row per run of the
-- comparison of a mirror's destination with its source at one source
-- position. The hold_* columns are the hand-shake between the verification
-- job and the mirror's CDC run, which may run on different replicas: the job
-- requests a hold (hold_state requested, hold_floor), the run arms it
-- (armed), the job writes the exact position (hold_lsn), the run holds there
-- (held, held_applied), the job releases it (released); a run that waited
-- too long gives up (expired).
CREATE TABLE verifications (
    id            bigserial PRIMARY KEY,
    mirror_id     bigint NOT NULL REFERENCES mirrors (id) ON DELETE CASCADE,
    state         text NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'done', 'failed', 'cancelled')),
    requested_by  text,
    tables        text[],
    lsn           pg_lsn,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    error         text,
    result        jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(result) = 'array'),
    rows_differing bigint,
    repair_of     bigint REFERENCES verifications (id) ON DELETE SET NULL,
    hold_state    text CHECK (hold_state IN ('requested', 'armed', 'held', 'released', 'expired')),
    hold_floor    pg_lsn,
    hold_lsn      pg_lsn,
    held_applied  pg_lsn,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX verifications_mirror ON verifications (mirror_id, id DESC);
COMMENT ON TABLE verifications IS 'Comparisons of a mirror''s destination with its source at one source position (docs/consistency.md); result holds one object per table.';

-- Continuous verification: a mirror with a row here is verified every
-- interval_seconds (PUT /v1/mirrors/{name}/verify-interval).
CREATE TABLE verify_schedules (
    mirror_id        bigint PRIMARY KEY REFERENCES mirrors (id) ON DELETE CASCADE,
    interval_seconds integer NOT NULL CHECK (interval_seconds BETWEEN 60 AND 2592000),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE verify_schedules IS 'Mirrors verified on a schedule (verify_interval_seconds); no row means off.';

-- Wake the mirror's run when a verification asks for, or ends, a hold.
-- +goose StatementBegin
CREATE FUNCTION pgmirror_notify_verification() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pgmirror_mirror_control', NEW.mirror_id::text);
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER verifications_notify AFTER INSERT OR UPDATE OF hold_state, hold_lsn, state ON verifications
    FOR EACH ROW EXECUTE FUNCTION pgmirror_notify_verification();

-- +goose Down
DROP TABLE verify_schedules;
DROP TABLE verifications;
DROP FUNCTION pgmirror_notify_verification();
