-- +goose Up
-- A password change no longer revokes the user's tokens by itself: the
-- service increments token_version on a password change only when
-- SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true (and when it replaces the
-- default admin password at startup). A role change still revokes, through
-- the API or with SQL.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgmirror_bump_token_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.role IS DISTINCT FROM OLD.role THEN
        NEW.token_version := OLD.token_version + 1;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
COMMENT ON COLUMN users.token_version IS 'Version of the user''s API tokens; incremented when the role changes (and by the service on a password change when SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true), which revokes every older token. Increment it by hand to revoke a user''s tokens.';

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pgmirror_bump_token_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.password_hash IS DISTINCT FROM OLD.password_hash OR NEW.role IS DISTINCT FROM OLD.role THEN
        NEW.token_version := OLD.token_version + 1;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd
COMMENT ON COLUMN users.token_version IS 'Version of the user''s API tokens; incremented when password_hash or role changes, which revokes every older token.';
