package db

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
)

// settingJWTSecret is the settings key of the generated JWT signing secret.
const settingJWTSecret = "jwt_secret"

// jwtSecretPlace is where the encrypted JWT secret is bound to.
const jwtSecretPlace = "settings." + settingJWTSecret

// JWTSecret returns the catalog's JWT signing secret, generating 32 random
// bytes on first use. The secret is stored encrypted. Concurrent callers on
// any replica get the same secret: the first insert wins and everyone reads
// the stored value.
func (s *Store) JWTSecret(ctx context.Context) ([]byte, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return nil, fmt.Errorf("generate JWT secret: %w", err)
	}
	sealed, err := s.keys.Seal([]byte(base64.StdEncoding.EncodeToString(buf)), jwtSecretPlace)
	if err != nil {
		return nil, fmt.Errorf("encrypt JWT secret: %w", err)
	}
	if _, err := s.q.Exec(ctx, `INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`,
		settingJWTSecret, sealed); err != nil {
		return nil, fmt.Errorf("store JWT secret: %w", err)
	}
	if err := s.q.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`, settingJWTSecret).Scan(&sealed); err != nil {
		return nil, fmt.Errorf("read JWT secret: %w", translate(err))
	}
	encoded, err := s.keys.Open(sealed, jwtSecretPlace)
	if err != nil {
		return nil, fmt.Errorf("decrypt the JWT secret in settings: %w", err)
	}
	secret, err := base64.StdEncoding.DecodeString(string(encoded))
	if err != nil || len(secret) < 32 {
		return nil, fmt.Errorf("read JWT secret: the stored value in settings is not 32 or more base64-encoded bytes")
	}
	return secret, nil
}
