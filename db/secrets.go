package db

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/secretbox"
)

// secretsLockKey is the transaction advisory lock that serialises
// EncryptSecrets across replicas ("pgmsecrt" in ASCII).
const secretsLockKey int64 = 0x7067_6d73_6563_7274

// secretCell is one stored secret: where it is bound to, its stored text,
// and the statement that replaces it.
type secretCell struct {
	place string
	value string
	sql   string
	args  []any // the row's key; the new value is appended
}

// secretCells returns every secret in the catalog. With lock, the rows stay
// locked until q's transaction ends.
func secretCells(ctx context.Context, q pgx.Tx, lock bool) ([]secretCell, error) {
	forUpdate := ""
	if lock {
		forUpdate = " FOR UPDATE"
	}
	rows, err := q.Query(ctx, `SELECT id, name, password, ssl_root_cert FROM peers ORDER BY id`+forUpdate)
	if err != nil {
		return nil, fmt.Errorf("read peer secrets: %w", err)
	}
	var cells []secretCell
	var id int64
	var name, password string
	var rootCert *string
	_, err = pgx.ForEachRow(rows, []any{&id, &name, &password, &rootCert}, func() error {
		cells = append(cells, secretCell{place: peerPasswordPlace(name), value: password,
			sql: `UPDATE peers SET password = $2 WHERE id = $1`, args: []any{id}})
		if rootCert != nil {
			cells = append(cells, secretCell{place: peerRootCertPlace(name), value: *rootCert,
				sql: `UPDATE peers SET ssl_root_cert = $2 WHERE id = $1`, args: []any{id}})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read peer secrets: %w", err)
	}
	var jwt string
	err = q.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`+forUpdate, settingJWTSecret).Scan(&jwt)
	switch {
	case err == nil:
		cells = append(cells, secretCell{place: jwtSecretPlace, value: jwt,
			sql: `UPDATE settings SET value = $2 WHERE key = $1`, args: []any{settingJWTSecret}})
	case err != pgx.ErrNoRows:
		return nil, fmt.Errorf("read JWT secret: %w", err)
	}
	return cells, nil
}

// SecretsResult counts what EncryptSecrets changed.
type SecretsResult struct {
	// Encrypted is the number of clear-text values it encrypted.
	Encrypted int
	// Reencrypted is the number of values it moved from an older key to the
	// current one.
	Reencrypted int
}

// EncryptSecrets encrypts every clear-text secret in the catalog (rows
// written before migration 00003) with the current key and, with rotate,
// re-encrypts values sealed with older keys with the current key. It runs in
// one transaction under an advisory lock, so replicas starting together do
// the work once and a failure leaves everything as it was.
func (s *Store) EncryptSecrets(ctx context.Context, rotate bool) (SecretsResult, error) {
	var res SecretsResult
	tx, err := s.q.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("encrypt secrets: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rollback after commit is a no-op
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, secretsLockKey); err != nil {
		return res, fmt.Errorf("encrypt secrets: take advisory lock: %w", err)
	}
	cells, err := secretCells(ctx, tx, true)
	if err != nil {
		return res, fmt.Errorf("encrypt secrets: %w", err)
	}
	for _, c := range cells {
		plain := []byte(c.value)
		if secretbox.IsSealed(c.value) {
			id, err := secretbox.SealedKeyID(c.value)
			if err != nil {
				return res, fmt.Errorf("encrypt secrets: %s: %w", c.place, err)
			}
			if !rotate || id == s.keys.CurrentID() {
				continue
			}
			if plain, err = s.keys.Open(c.value, c.place); err != nil {
				return res, fmt.Errorf("re-encrypt %s: %w", c.place, err)
			}
			res.Reencrypted++
		} else {
			res.Encrypted++
		}
		sealed, err := s.keys.Seal(plain, c.place)
		if err != nil {
			return res, fmt.Errorf("encrypt %s: %w", c.place, err)
		}
		if _, err := tx.Exec(ctx, c.sql, append(c.args, sealed)...); err != nil {
			return res, fmt.Errorf("store encrypted %s: %w", c.place, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("encrypt secrets: %w", err)
	}
	return res, nil
}

// UnknownKeysError means the catalog holds values encrypted with keys the
// keyring lacks.
type UnknownKeysError struct {
	// KeyIDs are the missing keys' ids, sorted.
	KeyIDs []string
	// Current is the id of the keyring's current key.
	Current string
}

func (e *UnknownKeysError) Error() string {
	return fmt.Sprintf("the catalog holds secrets encrypted with key(s) %s, which are not configured (the current key is %s): "+
		"give the key that was used before (SERVICE_ENCRYPTION_KEY, SERVICE_ENCRYPTION_KEY_FILE or SERVICE_ENCRYPTION_OLD_KEYS); "+
		"if it is lost, the peer passwords must be entered again (see docs/security.md)",
		strings.Join(e.KeyIDs, ", "), e.Current)
}

// CheckSecretKeys returns an *UnknownKeysError when a stored secret was
// encrypted with a key the keyring does not hold, and otherwise the number of
// values still encrypted with an older key (which `pgmirror rotate-key`
// moves to the current one). Clear-text values are not counted.
func (s *Store) CheckSecretKeys(ctx context.Context) (older int, err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, fmt.Errorf("check secret keys: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	cells, err := secretCells(ctx, tx, false)
	if err != nil {
		return 0, fmt.Errorf("check secret keys: %w", err)
	}
	var unknown []string
	for _, c := range cells {
		if !secretbox.IsSealed(c.value) {
			continue
		}
		id, err := secretbox.SealedKeyID(c.value)
		if err != nil {
			return 0, fmt.Errorf("check secret keys: %s: %w", c.place, err)
		}
		switch {
		case !s.keys.Has(id):
			if !slices.Contains(unknown, id) {
				unknown = append(unknown, id)
			}
		case id != s.keys.CurrentID():
			older++
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return older, &UnknownKeysError{KeyIDs: unknown, Current: s.keys.CurrentID()}
	}
	return older, nil
}
