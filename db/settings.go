package db

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// settingJWTSecret is the settings key of the generated JWT signing secret.
const settingJWTSecret = "jwt_secret"

// JWTSecret returns the catalog's JWT signing secret, generating 32 random
// bytes on first use. Concurrent callers on any replica get the same secret:
// the first insert wins and everyone reads the stored value.
func (s *Store) JWTSecret(ctx context.Context) ([]byte, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return nil, fmt.Errorf("generate JWT secret: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`,
		settingJWTSecret, base64.StdEncoding.EncodeToString(buf)); err != nil {
		return nil, fmt.Errorf("store JWT secret: %w", err)
	}
	var encoded string
	if err := s.pool.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`, settingJWTSecret).Scan(&encoded); err != nil {
		return nil, fmt.Errorf("read JWT secret: %w", translate(err))
	}
	secret, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || len(secret) < 32 {
		return nil, fmt.Errorf("read JWT secret: the stored value in settings is not 32 or more base64-encoded bytes")
	}
	return secret, nil
}
