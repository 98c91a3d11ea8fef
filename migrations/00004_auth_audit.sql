-- +goose Up
-- Token revocation, login throttling and the audit log
-- (docs/security-auth.md explains all three).

-- token_version is copied into every API token (claim "ver") and compared on
-- every request: a token whose version is not the user's current one is
-- revoked. The trigger below increments it whenever the password or the role
-- changes, through the API or with SQL.
ALTER TABLE users ADD COLUMN token_version bigint NOT NULL DEFAULT 1;
COMMENT ON COLUMN users.token_version IS 'Version of the user''s API tokens; incremented when password_hash or role changes, which revokes every older token.';

-- +goose StatementBegin
CREATE FUNCTION pgmirror_bump_token_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.password_hash IS DISTINCT FROM OLD.password_hash OR NEW.role IS DISTINCT FROM OLD.role THEN
        NEW.token_version := OLD.token_version + 1;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
CREATE TRIGGER users_token_version BEFORE UPDATE ON users FOR EACH ROW EXECUTE FUNCTION pgmirror_bump_token_version();

-- Failed logins, per user name and per client address, shared by every
-- replica. Rows older than the throttling window are deleted as new failures
-- come in.
CREATE TABLE login_failures (
    id        bigserial PRIMARY KEY,
    kind      text NOT NULL CHECK (kind IN ('user', 'address')),
    subject   text NOT NULL,
    failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_subject ON login_failures (kind, subject, failed_at);
CREATE INDEX login_failures_failed_at ON login_failures (failed_at);
COMMENT ON TABLE login_failures IS 'Failed logins within the throttling window (SERVICE_LOGIN_FAILURE_WINDOW), by user name and by client address.';

-- Every change made through the API, successful or refused. Secret values are
-- never stored: details name the fields that changed, not their values.
CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- The acting user; no foreign key, so entries outlive the user.
    user_id     bigint NOT NULL,
    username    text NOT NULL,
    action      text NOT NULL,
    target_type text NOT NULL CHECK (target_type IN ('user', 'peer', 'mirror')),
    -- NULL when the request was refused before its target was known (for
    -- example a create with an invalid body).
    target_name text,
    result      text NOT NULL CHECK (result IN ('success', 'failure')),
    status      integer NOT NULL CHECK (status BETWEEN 100 AND 599),
    details     jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_target ON audit_log (target_type, target_name, id DESC);
CREATE INDEX audit_log_username ON audit_log (username, id DESC);
COMMENT ON TABLE audit_log IS 'Changes made through the API (users, peers, mirrors, control operations) with the acting user and the HTTP status; newest first through GET /v1/audit.';

-- +goose Down
DROP TABLE audit_log;
DROP TABLE login_failures;
DROP TRIGGER users_token_version ON users;
DROP FUNCTION pgmirror_bump_token_version();
ALTER TABLE users DROP COLUMN token_version;
