package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/secretbox"
)

// embeddedKeyFile is the key file that the embedded default keeps in
// SERVICE_DATA_DIR.
const embeddedKeyFile = "encryption.key"

// errNoKey is the refusal to start an external catalog without a key.
var errNoKey = errors.New("no catalog encryption key: with SERVICE_DATABASE_URL set, give the key that encrypts peer passwords " +
	"and the JWT secret in SERVICE_ENCRYPTION_KEY or SERVICE_ENCRYPTION_KEY_FILE (create one with `pgmirror gen-key`, " +
	"give the same key to every replica and keep a copy: without it the stored peer passwords are lost; see docs/security.md)")

// loadKeyring returns the catalog encryption keys: the current key from
// SERVICE_ENCRYPTION_KEY or the first line of SERVICE_ENCRYPTION_KEY_FILE,
// older keys from the file's further lines and SERVICE_ENCRYPTION_OLD_KEYS.
// With neither set, an external catalog is refused, and the embedded
// default uses (and on first start creates) SERVICE_DATA_DIR/encryption.key.
func loadKeyring(cfg config, logger *slog.Logger) (*secretbox.Keyring, error) {
	var keys [][]byte
	switch {
	case cfg.EncryptionKey != "":
		key, err := secretbox.ParseKey(cfg.EncryptionKey)
		if err != nil {
			return nil, fmt.Errorf("SERVICE_ENCRYPTION_KEY: %w", err)
		}
		keys = append(keys, key)
	case cfg.EncryptionKeyFile != "":
		fileKeys, err := readKeyFile(cfg.EncryptionKeyFile, logger)
		if err != nil {
			return nil, fmt.Errorf("SERVICE_ENCRYPTION_KEY_FILE: %w", err)
		}
		keys = fileKeys
	case cfg.DatabaseURL != "":
		return nil, errNoKey
	default:
		fileKeys, err := embeddedKeys(cfg.DataDir, logger)
		if err != nil {
			return nil, err
		}
		keys = fileKeys
	}
	for i, text := range strings.Split(cfg.EncryptionOldKeys, ",") {
		if strings.TrimSpace(text) == "" {
			continue
		}
		key, err := secretbox.ParseKey(text)
		if err != nil {
			return nil, fmt.Errorf("SERVICE_ENCRYPTION_OLD_KEYS, key %d: %w", i+1, err)
		}
		keys = append(keys, key)
	}
	keyring, err := secretbox.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		return nil, fmt.Errorf("catalog encryption keys: %w", err)
	}
	return keyring, nil
}

// readKeyFile reads a key file: one key per line (64 hex digits or base64
// of 32 bytes), the current key first; blank lines and lines starting with
// # are ignored. A file that other users may read or write, or that its
// group may write, is refused (whoever can write it can replace the key);
// one that its group may read gives a warning.
func readKeyFile(path string, logger *slog.Logger) ([][]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	perm := st.Mode().Perm()
	switch {
	case perm&0o004 != 0:
		return nil, fmt.Errorf("key file %s can be read by every local user (mode %04o): make it private with chmod 600 %s", path, perm, path)
	case perm&0o002 != 0:
		return nil, fmt.Errorf("key file %s can be written by every local user (mode %04o), who could replace the key: make it private with chmod 600 %s", path, perm, path)
	case perm&0o020 != 0:
		return nil, fmt.Errorf("key file %s can be written by its group (mode %04o), whose members could replace the key: make it private with chmod 600 %s", path, perm, path)
	case perm&0o040 != 0:
		logger.Warn("the encryption key file can be read by its group; chmod 600 makes it private", "path", path, "mode", fmt.Sprintf("%04o", perm))
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	var keys [][]byte
	for n, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, err := secretbox.ParseKey(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n+1, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no key: put a key from `pgmirror gen-key` on its first line", path)
	}
	return keys, nil
}

// embeddedKeys reads SERVICE_DATA_DIR/encryption.key, creating it with a new
// key (mode 0600) on first start.
func embeddedKeys(dataDir string, logger *slog.Logger) ([][]byte, error) {
	path := filepath.Join(dataDir, embeddedKeyFile)
	keys, err := readKeyFile(path, logger)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return keys, err
	}
	// The embedded cluster's data directory goes below it: as root, the
	// postgres OS user must be able to traverse it.
	if err := localpg.MkdirAll(dataDir); err != nil {
		return nil, fmt.Errorf("create data directory %s: %w", dataDir, err)
	}
	key, err := secretbox.GenerateKey()
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readKeyFile(path, logger) // another process created it first
	}
	if err != nil {
		return nil, fmt.Errorf("create key file: %w", err)
	}
	_, err = fmt.Fprintf(f, "# pgmirror catalog encryption key (key id %s): back it up; without it the stored peer passwords are lost.\n%s\n",
		secretbox.KeyID(key), secretbox.EncodeKey(key))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("write key file %s: %w", path, err)
	}
	logger.Info("generated the catalog encryption key; back it up together with the data directory", "path", path, "key_id", secretbox.KeyID(key))
	return [][]byte{key}, nil
}

// genKey prints a new key for SERVICE_ENCRYPTION_KEY or a key file.
func genKey(stdout io.Writer) error {
	key, err := secretbox.GenerateKey()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, secretbox.EncodeKey(key))
	return err
}

// prepareSecrets runs after the migrations: it encrypts clear-text secrets
// left by older versions and, with rotate, moves every secret to the current
// key. It warns about secrets under keys the keyring lacks (their peers fail
// to connect with an error naming the key until the key is given or their
// passwords are entered again).
func prepareSecrets(ctx context.Context, store *db.Store, keys *secretbox.Keyring, rotate bool, logger *slog.Logger) (db.SecretsResult, error) {
	older, err := store.CheckSecretKeys(ctx)
	var unknown *db.UnknownKeysError
	if errors.As(err, &unknown) {
		if rotate {
			return db.SecretsResult{}, err
		}
		logger.Warn("some catalog secrets cannot be decrypted: "+unknown.Error(), "missing_key_ids", unknown.KeyIDs, "current_key_id", unknown.Current)
	} else if err != nil {
		return db.SecretsResult{}, err
	}
	res, err := store.EncryptSecrets(ctx, rotate)
	if err != nil {
		return res, err
	}
	if res.Encrypted > 0 {
		logger.Info("encrypted the clear-text secrets in the catalog", "values", res.Encrypted, "key_id", keys.CurrentID())
	}
	if !rotate && older > 0 {
		logger.Info("some catalog secrets are encrypted with an older key; run `pgmirror rotate-key` to move them to the current key",
			"values", older, "current_key_id", keys.CurrentID())
	}
	return res, nil
}
