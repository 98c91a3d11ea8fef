package secretbox_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/secretbox"
)

func newKeyring(t *testing.T, old ...[]byte) (*secretbox.Keyring, []byte) {
	t.Helper()
	raw, err := secretbox.GenerateKey()
	require.NoError(t, err)
	k, err := secretbox.NewKeyring(raw, old...)
	require.NoError(t, err)
	return k, raw
}

func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	k, raw := newKeyring(t)
	sealed, err := k.Seal([]byte("s3cret-password"), "peers.password:src")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sealed, "enc:v1:"+secretbox.KeyID(raw)+":"), sealed)
	require.NotContains(t, sealed, "s3cret")
	id, err := secretbox.SealedKeyID(sealed)
	require.NoError(t, err)
	require.Equal(t, k.CurrentID(), id)

	plain, err := k.Open(sealed, "peers.password:src")
	require.NoError(t, err)
	require.Equal(t, "s3cret-password", string(plain))

	// A fresh nonce each time: the same secret never seals to the same text.
	again, err := k.Seal([]byte("s3cret-password"), "peers.password:src")
	require.NoError(t, err)
	require.NotEqual(t, sealed, again)

	empty, err := k.Seal(nil, "peers.password:src")
	require.NoError(t, err)
	plain, err = k.Open(empty, "peers.password:src")
	require.NoError(t, err)
	require.Empty(t, plain)
}

func TestOpenDetectsTampering(t *testing.T) {
	t.Parallel()
	k, _ := newKeyring(t)
	sealed, err := k.Seal([]byte("s3cret-password"), "peers.password:src")
	require.NoError(t, err)
	i := strings.LastIndex(sealed, ":") + 1
	body, err := base64.RawURLEncoding.DecodeString(sealed[i:])
	require.NoError(t, err)
	for pos := range body {
		flipped := bytes.Clone(body)
		flipped[pos] ^= 0x01
		_, err := k.Open(sealed[:i]+base64.RawURLEncoding.EncodeToString(flipped), "peers.password:src")
		require.Error(t, err, "flipping a bit of byte %d went unnoticed", pos)
	}
	_, err = k.Open(sealed[:len(sealed)-4], "peers.password:src")
	require.Error(t, err)
	_, err = k.Open(sealed[:i]+"!!", "peers.password:src")
	require.ErrorContains(t, err, "malformed")
}

func TestOpenRefusesAnotherPlace(t *testing.T) {
	t.Parallel()
	k, _ := newKeyring(t)
	sealed, err := k.Seal([]byte("s3cret-password"), "peers.password:src")
	require.NoError(t, err)
	_, err = k.Open(sealed, "peers.password:dst")
	require.ErrorContains(t, err, "copied from another row")
	_, err = k.Open(sealed, "settings.jwt_secret")
	require.Error(t, err)
}

func TestOpenWithWrongKey(t *testing.T) {
	t.Parallel()
	k1, _ := newKeyring(t)
	k2, _ := newKeyring(t)
	sealed, err := k1.Seal([]byte("s3cret-password"), "peers.password:src")
	require.NoError(t, err)
	_, err = k2.Open(sealed, "peers.password:src")
	var unknown *secretbox.UnknownKeyError
	require.ErrorAs(t, err, &unknown)
	require.Equal(t, k1.CurrentID(), unknown.KeyID)
	require.Contains(t, err.Error(), k1.CurrentID())

	// Pretending the value belongs to k2's key id does not help either.
	forged := strings.Replace(sealed, k1.CurrentID(), k2.CurrentID(), 1)
	_, err = k2.Open(forged, "peers.password:src")
	require.ErrorContains(t, err, "does not decrypt")
}

func TestOldKeysStillOpen(t *testing.T) {
	t.Parallel()
	oldRing, oldRaw := newKeyring(t)
	sealed, err := oldRing.Seal([]byte("s3cret-password"), "settings.jwt_secret")
	require.NoError(t, err)
	k, _ := newKeyring(t, oldRaw)
	require.NotEqual(t, oldRing.CurrentID(), k.CurrentID())
	require.True(t, k.Has(oldRing.CurrentID()))
	plain, err := k.Open(sealed, "settings.jwt_secret")
	require.NoError(t, err)
	require.Equal(t, "s3cret-password", string(plain))
	resealed, err := k.Seal(plain, "settings.jwt_secret")
	require.NoError(t, err)
	id, err := secretbox.SealedKeyID(resealed)
	require.NoError(t, err)
	require.Equal(t, k.CurrentID(), id)

	_, err = secretbox.NewKeyring(oldRaw, oldRaw)
	require.ErrorContains(t, err, "given twice")
}

func TestOpenClearText(t *testing.T) {
	t.Parallel()
	k, _ := newKeyring(t)
	_, err := k.Open("hunter2", "peers.password:src")
	require.True(t, errors.Is(err, secretbox.ErrNotSealed))
	require.NotContains(t, err.Error(), "hunter2")
	require.False(t, secretbox.IsSealed("hunter2"))
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	raw, err := secretbox.GenerateKey()
	require.NoError(t, err)
	for _, text := range []string{
		secretbox.EncodeKey(raw),
		" " + secretbox.EncodeKey(raw) + "\n",
		hex.EncodeToString(raw),
		base64.RawURLEncoding.EncodeToString(raw),
	} {
		got, err := secretbox.ParseKey(text)
		require.NoError(t, err, text)
		require.Equal(t, raw, got)
	}
	_, err = secretbox.ParseKey(base64.StdEncoding.EncodeToString(raw[:16]))
	require.ErrorContains(t, err, "16 bytes")
	_, err = secretbox.ParseKey("not a key at all")
	require.ErrorContains(t, err, "pgmirror gen-key")
	require.NotContains(t, err.Error(), "not a key at all")
}

func TestKeyringNeverPrintsKeys(t *testing.T) {
	t.Parallel()
	k, raw := newKeyring(t)
	for _, s := range []string{k.String(), k.LogValue().String()} {
		require.Contains(t, s, k.CurrentID())
		require.NotContains(t, s, secretbox.EncodeKey(raw))
	}
}
