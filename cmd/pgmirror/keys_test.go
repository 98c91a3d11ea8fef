package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// TestKeyFileModes checks the key file's permissions: a file others can
// read or write, or its group can write, is refused with the chmod to run;
// one its group can read is used with a warning; 0600 and 0400 are used.
func TestKeyFileModes(t *testing.T) {
	t.Parallel()
	var log strings.Builder
	logger := slog.New(slog.NewTextHandler(&log, nil))
	key, err := secretbox.GenerateKey()
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(file, []byte(secretbox.EncodeKey(key)+"\n"), 0o600))
	for _, c := range []struct {
		mode os.FileMode
		want string // "" when the file is used
	}{
		{0o644, "read by every local user"},
		{0o602, "written by every local user"},
		{0o622, "written by every local user"},
		{0o620, "written by its group"},
		{0o660, "written by its group"},
		{0o600, ""},
		{0o400, ""},
		{0o640, ""},
	} {
		require.NoError(t, os.Chmod(file, c.mode))
		log.Reset()
		k, err := loadKeyring(config{EncryptionKeyFile: file}, logger)
		if c.want == "" {
			require.NoError(t, err, "mode %04o", c.mode)
			require.Equal(t, secretbox.KeyID(key), k.CurrentID())
			require.Equal(t, c.mode&0o040 != 0, strings.Contains(log.String(), "read by its group"), "mode %04o: %s", c.mode, log.String())
			continue
		}
		require.ErrorContains(t, err, c.want, "mode %04o", c.mode)
		require.ErrorContains(t, err, "chmod 600 "+file)
	}
}
