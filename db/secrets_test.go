package db_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/db/secretbox"
)

func randomText(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func newKey(t *testing.T) []byte {
	t.Helper()
	raw, err := secretbox.GenerateKey()
	require.NoError(t, err)
	return raw
}

func keyring(t *testing.T, current []byte, old ...[]byte) *secretbox.Keyring {
	t.Helper()
	k, err := secretbox.NewKeyring(current, old...)
	require.NoError(t, err)
	return k
}

// storedKeyIDs returns the key id of every secret stored in the catalog.
func storedKeyIDs(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT password FROM peers
		UNION ALL SELECT ssl_root_cert FROM peers WHERE ssl_root_cert IS NOT NULL
		UNION ALL SELECT value FROM settings WHERE key = 'jwt_secret'`)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		id, err := secretbox.SealedKeyID(v)
		require.NoError(t, err, "a stored secret is not encrypted")
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func TestSecretsEncryptedAtRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	password := "pw-" + randomText(t)
	_, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: "src", Host: "h", Port: 1, User: "u", Password: password, Database: "d", SSLMode: "verify-full",
		SSLRootCert: testCAPEM(t)})
	require.NoError(t, err)
	jwt, err := store.JWTSecret(ctx)
	require.NoError(t, err)

	require.Empty(t, pgtest.FindText(t, store.Pool(), password), "the peer password is stored in clear text")
	require.Empty(t, pgtest.FindText(t, store.Pool(), base64.StdEncoding.EncodeToString(jwt)), "the JWT secret is stored in clear text")
	require.Empty(t, pgtest.FindText(t, store.Pool(), "BEGIN CERTIFICATE"), "the CA certificate is stored in clear text")
	require.Len(t, storedKeyIDs(t, store.Pool()), 3)

	// A changed password is encrypted too, and it is the one used to connect.
	newPassword := "pw-" + randomText(t)
	_, err = store.PeerUpdate(ctx, "src", db.PeerUpdateParams{Password: &newPassword})
	require.NoError(t, err)
	require.Empty(t, pgtest.FindText(t, store.Pool(), newPassword))
	p, err := store.PeerGetByName(ctx, "src")
	require.NoError(t, err)
	require.True(t, p.HasSSLRootCert)
	cfg, err := p.ConnConfig()
	require.NoError(t, err)
	require.Equal(t, newPassword, cfg.Password)

	// The catalog itself refuses a clear-text password.
	_, err = store.Pool().Exec(ctx, `UPDATE peers SET password = 'clear' WHERE name = 'src'`)
	require.ErrorContains(t, err, "peers_password_encrypted")

	// An empty CA certificate removes it.
	empty := ""
	p, err = store.PeerUpdate(ctx, "src", db.PeerUpdateParams{SSLRootCert: &empty})
	require.NoError(t, err)
	require.False(t, p.HasSSLRootCert)
}

func TestSecretsCannotMoveBetweenPeers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	for _, name := range []string{"a", "b"} {
		_, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: name, Host: "h", Port: 1, User: "u", Password: "pw-" + name, Database: "d", SSLMode: "disable"})
		require.NoError(t, err)
	}
	_, err := store.Pool().Exec(ctx, `UPDATE peers SET password = (SELECT password FROM peers WHERE name = 'a') WHERE name = 'b'`)
	require.NoError(t, err)
	p, err := store.PeerGetByName(ctx, "b")
	require.NoError(t, err)
	_, err = p.ConnConfig()
	require.ErrorContains(t, err, `decrypt the password of peer "b"`)
	require.ErrorContains(t, err, "copied from another row")
}

// TestEncryptLegacySecrets stores clear-text secrets as pgmirror did before
// migration 00003, then lets several processes encrypt them at once.
func TestEncryptLegacySecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	provider := migrationProvider(t, pool)
	_, err := provider.UpTo(ctx, 2)
	require.NoError(t, err)
	password := "legacy-" + randomText(t)
	jwt := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("j", 32)))
	_, err = pool.Exec(ctx, `INSERT INTO peers (name, host, port, "user", password, database) VALUES ('old', 'h', 1, 'u', $1, 'd')`, password)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO settings (key, value) VALUES ('jwt_secret', $1)`, jwt)
	require.NoError(t, err)
	require.NoError(t, db.Migrate(ctx, pool, discard()))

	key := newKey(t)
	var wg sync.WaitGroup
	results := make([]db.SecretsResult, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[i], err = db.New(pool, keyring(t, key)).EncryptSecrets(ctx, false)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	total := 0
	for _, r := range results {
		total += r.Encrypted
	}
	require.Equal(t, 2, total, "the clear-text values must be encrypted exactly once")
	require.Empty(t, pgtest.FindText(t, pool, password))
	require.Empty(t, pgtest.FindText(t, pool, jwt))

	store := db.New(pool, keyring(t, key))
	p, err := store.PeerGetByName(ctx, "old")
	require.NoError(t, err)
	cfg, err := p.ConnConfig()
	require.NoError(t, err)
	require.Equal(t, password, cfg.Password)
	secret, err := store.JWTSecret(ctx)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("j", 32), string(secret), "the existing JWT secret must be kept, or every token would end")
}

func TestRotateKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	require.NoError(t, db.Migrate(ctx, pool, discard()))
	oldKey, newKeyRaw := newKey(t), newKey(t)
	oldStore := db.New(pool, keyring(t, oldKey))
	_, err := oldStore.PeerCreate(ctx, db.PeerCreateParams{Name: "p", Host: "h", Port: 1, User: "u", Password: "the-password", Database: "d", SSLMode: "verify-ca",
		SSLRootCert: testCAPEM(t)})
	require.NoError(t, err)
	jwt, err := oldStore.JWTSecret(ctx)
	require.NoError(t, err)

	// A keyring without the old key refuses to work, naming the key.
	stranger := db.New(pool, keyring(t, newKey(t)))
	_, err = stranger.CheckSecretKeys(ctx)
	var unknown *db.UnknownKeysError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, []string{secretbox.KeyID(oldKey)}, unknown.KeyIDs)
	p, err := stranger.PeerGetByName(ctx, "p")
	require.NoError(t, err)
	_, err = p.ConnConfig()
	require.ErrorContains(t, err, "encrypted with key "+secretbox.KeyID(oldKey))
	_, err = stranger.EncryptSecrets(ctx, true)
	require.ErrorContains(t, err, secretbox.KeyID(oldKey))

	// The new key current, the old one still known: everything decrypts,
	// and the rotation moves all three values to the new key.
	rotating := db.New(pool, keyring(t, newKeyRaw, oldKey))
	older, err := rotating.CheckSecretKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, older)
	res, err := rotating.EncryptSecrets(ctx, true)
	require.NoError(t, err)
	require.Equal(t, db.SecretsResult{Reencrypted: 3}, res)
	for _, id := range storedKeyIDs(t, pool) {
		require.Equal(t, secretbox.KeyID(newKeyRaw), id)
	}
	res, err = rotating.EncryptSecrets(ctx, true)
	require.NoError(t, err)
	require.Zero(t, res, "a second rotation has nothing to do")

	// The old key can now be dropped.
	newOnly := db.New(pool, keyring(t, newKeyRaw))
	older, err = newOnly.CheckSecretKeys(ctx)
	require.NoError(t, err)
	require.Zero(t, older)
	p, err = newOnly.PeerGetByName(ctx, "p")
	require.NoError(t, err)
	cfg, err := p.ConnConfig()
	require.NoError(t, err)
	require.Equal(t, "the-password", cfg.Password)
	require.NotNil(t, cfg.TLSConfig.RootCAs, "the CA certificate must still decrypt")
	got, err := newOnly.JWTSecret(ctx)
	require.NoError(t, err)
	require.Equal(t, jwt, got)
}

func testCAPEM(t *testing.T) string { return pgtest.NewCA(t).PEM() }
