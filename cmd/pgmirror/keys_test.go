package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/secretbox"
)

func TestEmbeddedKeyIsCreatedOnceAndPrivate(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := filepath.Join(t.TempDir(), "data-dir")
	first, err := loadKeyring(config{DataDir: dir}, logger)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, embeddedKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	again, err := loadKeyring(config{DataDir: dir}, logger)
	require.NoError(t, err)
	require.Equal(t, first.CurrentID(), again.CurrentID(), "a restart must keep the generated key")

	// An external catalog never gets a generated key.
	_, err = loadKeyring(config{DataDir: t.TempDir(), DatabaseURL: "postgres://x"}, logger)
	require.ErrorIs(t, err, errNoKey)
}

func TestKeyFileWithOldKeys(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys := make([][]byte, 3)
	for i := range keys {
		var err error
		keys[i], err = secretbox.GenerateKey()
		require.NoError(t, err)
	}
	file := filepath.Join(t.TempDir(), "keys")
	body := "# current first\n" + secretbox.EncodeKey(keys[0]) + "\n\n" + secretbox.EncodeKey(keys[1]) + "\n"
	require.NoError(t, os.WriteFile(file, []byte(body), 0o600))
	k, err := loadKeyring(config{EncryptionKeyFile: file, EncryptionOldKeys: secretbox.EncodeKey(keys[2])}, logger)
	require.NoError(t, err)
	require.Equal(t, secretbox.KeyID(keys[0]), k.CurrentID())
	require.True(t, k.Has(secretbox.KeyID(keys[1])))
	require.True(t, k.Has(secretbox.KeyID(keys[2])))

	require.NoError(t, os.WriteFile(file, []byte("# nothing\n"), 0o600))
	_, err = loadKeyring(config{EncryptionKeyFile: file}, logger)
	require.ErrorContains(t, err, "holds no key")
	require.NoError(t, os.WriteFile(file, []byte("bad key\n"), 0o600))
	_, err = loadKeyring(config{EncryptionKeyFile: file}, logger)
	require.ErrorContains(t, err, "line 1")
	require.NotContains(t, err.Error(), "bad key")
}
