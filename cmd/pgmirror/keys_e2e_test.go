package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/db/secretbox"
)

// runCommand runs the pgmirror binary once with a command on catalogURL.
func runCommand(t *testing.T, catalogURL, command string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, command)
	cmd.Env = append(os.Environ(), "SERVICE_DATABASE_URL="+catalogURL)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitExit waits for a service that must refuse to start and returns its output.
func waitExit(t *testing.T, s *service) string {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("pgmirror did not refuse to start:\n%s", s.output.String())
	}
	return s.output.String()
}

func newKeyText(t *testing.T) (text, id string) {
	t.Helper()
	raw, err := secretbox.GenerateKey()
	require.NoError(t, err)
	return secretbox.EncodeKey(raw), secretbox.KeyID(raw)
}

func TestGenKey(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary, "gen-key").Output()
	require.NoError(t, err)
	_, err = secretbox.ParseKey(string(out))
	require.NoError(t, err, "gen-key printed %q", out)
}

func TestServiceRefusesWithoutUsableKey(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	out := waitExit(t, launchService(t, catalog, "SERVICE_ENCRYPTION_KEY="))
	require.Contains(t, out, "no catalog encryption key")
	require.Contains(t, out, "pgmirror gen-key")

	keyText, _ := newKeyText(t)
	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte(keyText+"\n"), 0o644))
	out = waitExit(t, launchService(t, catalog, "SERVICE_ENCRYPTION_KEY=", "SERVICE_ENCRYPTION_KEY_FILE="+file))
	require.Contains(t, out, "chmod 600")
	require.NotContains(t, out, keyText, "the key must never be printed")

	out = waitExit(t, launchService(t, catalog, "SERVICE_ENCRYPTION_KEY=too-short"))
	require.Contains(t, out, "SERVICE_ENCRYPTION_KEY")
	require.NotContains(t, out, "too-short")
}

// TestRotateKeyCommand moves the catalog's secrets to a new key with
// `pgmirror rotate-key` and shows that the service then needs the new key
// and no longer the old one.
func TestRotateKeyCommand(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	keyA, idA := newKeyText(t)
	keyB, idB := newKeyText(t)

	s := startService(t, catalog, "SERVICE_ENCRYPTION_KEY="+keyA)
	s.createPeer("src", src)
	s.terminate(time.Minute)
	storedIDs := func() []string {
		var ids []string
		queryOne(t, catalog, &ids, `SELECT array_agg(split_part(v, ':', 3) ORDER BY v) FROM (
			SELECT password AS v FROM peers UNION ALL SELECT value FROM settings WHERE key = 'jwt_secret') s`)
		return ids
	}
	require.Equal(t, []string{idA, idA}, storedIDs())

	// The new key alone does not open the old values: rotate-key names the key it lacks.
	out, err := runCommand(t, catalog, "rotate-key", "SERVICE_ENCRYPTION_KEY="+keyB)
	require.Error(t, err, out)
	require.Contains(t, out, idA)
	out, err = runCommand(t, catalog, "rotate-key", "SERVICE_ENCRYPTION_KEY="+keyB, "SERVICE_ENCRYPTION_OLD_KEYS="+keyA)
	require.NoError(t, err, out)
	require.Contains(t, out, "reencrypted=2")
	require.Equal(t, []string{idB, idB}, storedIDs())
	require.NotContains(t, out, keyA)
	require.NotContains(t, out, keyB)

	// The old key alone no longer works, with an error naming the key.
	out = waitExit(t, launchService(t, catalog, "SERVICE_ENCRYPTION_KEY="+keyA))
	require.Contains(t, out, "encrypted with key "+idB)

	// The new key alone does: the peer's password still decrypts.
	s = startService(t, catalog, "SERVICE_ENCRYPTION_KEY="+keyB)
	var test struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	s.mustDo("POST", "/v1/peers/src/test", nil, 200, &test)
	require.True(t, test.Success, test.Error)
	require.False(t, strings.Contains(s.output.String(), keyB), "the key must never be logged")
}
