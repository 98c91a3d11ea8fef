-- +goose Up
-- Secrets in the catalog are encrypted by pgmirror (db/secretbox) with the
-- service's encryption key: enc:v1:<key id>:<base64url(nonce|ciphertext)>.
-- SQL cannot encrypt (it has no key), so `pgmirror serve` encrypts the
-- clear-text rows of older versions at start, before it serves; the checks
-- below are NOT VALID so that those rows may wait for it, while every new or
-- changed row must already be encrypted.
ALTER TABLE peers ADD COLUMN ssl_root_cert text CHECK (ssl_root_cert LIKE 'enc:v1:%');
ALTER TABLE peers ADD CONSTRAINT peers_password_encrypted CHECK (password LIKE 'enc:v1:%') NOT VALID;
ALTER TABLE settings ADD CONSTRAINT settings_jwt_secret_encrypted
    CHECK (key <> 'jwt_secret' OR value LIKE 'enc:v1:%') NOT VALID;
COMMENT ON COLUMN peers.password IS 'The peer password, encrypted: enc:v1:<key id>:<data> (docs/security.md). Write-only through the API.';
COMMENT ON COLUMN peers.ssl_root_cert IS 'The PEM CA certificate(s) that verify the peer''s server certificate (ssl_mode verify-ca / verify-full), encrypted like password; NULL when none.';
COMMENT ON COLUMN settings.value IS 'The setting''s value; jwt_secret is encrypted like peers.password.';

-- +goose Down
-- Values stay encrypted: an older pgmirror cannot use them, so peer passwords
-- must be entered again (PUT /v1/peers/{name}) and the JWT secret row deleted
-- (DELETE FROM settings WHERE key = 'jwt_secret'; every token then ends).
COMMENT ON COLUMN settings.value IS NULL;
COMMENT ON COLUMN peers.password IS NULL;
ALTER TABLE settings DROP CONSTRAINT settings_jwt_secret_encrypted;
ALTER TABLE peers DROP CONSTRAINT peers_password_encrypted;
ALTER TABLE peers DROP COLUMN ssl_root_cert;
