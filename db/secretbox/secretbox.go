// Package secretbox encrypts the secrets pgmirror keeps in its catalog (peer
// passwords, peer CA certificates, the generated JWT secret) and decrypts
// them again.
//
// A sealed value is text that fits a text column:
//
//	enc:v1:<key id>:<base64url(nonce | ciphertext | tag)>
//
// The cipher is XChaCha20-Poly1305 (golang.org/x/crypto/chacha20poly1305)
// with a random 24-byte nonce per value. The key id is the first 8 hex
// digits of the SHA-256 of the 32 key bytes, so the keyring finds the key a
// value was sealed with, and old keys keep decrypting after a new key became
// current. The associated data binds each value to the place it belongs
// (for example "peers.password:<peer name>") together with the value's
// header: a value copied into another row or column does not decrypt.
//
// The package never sees the environment or files; cmd/pgmirror turns the
// configuration into a Keyring.
package secretbox

import (
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"
)

// KeySize is the length of a key in bytes.
const KeySize = chacha20poly1305.KeySize

// Prefix starts every sealed value (version 1 of the format).
const Prefix = "enc:v1:"

// ErrNotSealed means a value is not in the sealed format (it is clear text,
// or something else entirely).
var ErrNotSealed = errors.New("value is not encrypted (it does not start with " + Prefix + ")")

// UnknownKeyError means a value was sealed with a key that the keyring does
// not hold.
type UnknownKeyError struct {
	// KeyID is the id of the key the value was sealed with.
	KeyID string
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("the value was encrypted with key %s, which is not configured: add that key (SERVICE_ENCRYPTION_OLD_KEYS or a further line in SERVICE_ENCRYPTION_KEY_FILE)", e.KeyID)
}

// Key is one 32-byte encryption key with its id.
type Key struct {
	id   string
	aead cipher.AEAD
}

// ID returns the key's id: the first 8 hex digits of SHA-256 of the key.
func (k Key) ID() string { return k.id }

// NewKey returns the key made of the 32 bytes raw.
func NewKey(raw []byte) (Key, error) {
	if len(raw) != KeySize {
		return Key{}, fmt.Errorf("an encryption key must be %d bytes, got %d", KeySize, len(raw))
	}
	aead, err := chacha20poly1305.NewX(raw)
	if err != nil {
		return Key{}, fmt.Errorf("create cipher: %w", err)
	}
	return Key{id: KeyID(raw), aead: aead}, nil
}

// KeyID returns the id of the raw key: the first 8 hex digits of its SHA-256.
func KeyID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:4])
}

// GenerateKey returns 32 random bytes for a new key.
func GenerateKey() ([]byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generate encryption key: %w", err)
	}
	return raw, nil
}

// EncodeKey returns the standard base64 text of a raw key, the form
// ParseKey reads and `pgmirror gen-key` prints.
func EncodeKey(raw []byte) string { return base64.StdEncoding.EncodeToString(raw) }

// ParseKey reads a key written as 64 hex digits or as base64 (standard or
// URL alphabet, with or without padding) of 32 bytes. Surrounding white
// space is ignored. The error never repeats the text.
func ParseKey(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	if len(text) == 2*KeySize {
		if raw, err := hex.DecodeString(text); err == nil {
			return raw, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(text); err == nil {
			if len(raw) != KeySize {
				return nil, fmt.Errorf("the key decodes to %d bytes, want %d: create one with `pgmirror gen-key`", len(raw), KeySize)
			}
			return raw, nil
		}
	}
	return nil, fmt.Errorf("the key is neither 64 hex digits nor base64 of %d bytes: create one with `pgmirror gen-key`", KeySize)
}

// Keyring holds the current key, which seals new values, and older keys that
// still open values sealed with them. It is safe for concurrent use.
type Keyring struct {
	current Key
	byID    map[string]Key
}

// NewKeyring returns a keyring whose current key is current and that also
// opens values sealed with any of old. Two keys with the same id are
// refused.
func NewKeyring(current []byte, old ...[]byte) (*Keyring, error) {
	cur, err := NewKey(current)
	if err != nil {
		return nil, fmt.Errorf("current key: %w", err)
	}
	k := &Keyring{current: cur, byID: map[string]Key{cur.id: cur}}
	for i, raw := range old {
		key, err := NewKey(raw)
		if err != nil {
			return nil, fmt.Errorf("old key %d: %w", i+1, err)
		}
		if _, dup := k.byID[key.id]; dup {
			return nil, fmt.Errorf("old key %d: key %s is given twice", i+1, key.id)
		}
		k.byID[key.id] = key
	}
	return k, nil
}

// CurrentID returns the id of the key that seals new values.
func (k *Keyring) CurrentID() string { return k.current.id }

// Has reports whether the keyring holds the key with the given id.
func (k *Keyring) Has(id string) bool {
	_, ok := k.byID[id]
	return ok
}

// LogValue shows the key ids only, so a keyring that ends up in a log line
// reveals no key.
func (k *Keyring) LogValue() slog.Value {
	ids := make([]string, 0, len(k.byID))
	for id := range k.byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slog.GroupValue(slog.String("current", k.current.id), slog.Any("keys", ids))
}

// String shows the key ids only.
func (k *Keyring) String() string { return "keyring(current " + k.current.id + ")" }

// Seal encrypts plaintext with the current key, bound to where (for example
// "peers.password:src"), and returns the sealed text.
func (k *Keyring) Seal(plaintext []byte, where string) (string, error) {
	header := Prefix + k.current.id + ":"
	nonce := make([]byte, k.current.aead.NonceSize(), k.current.aead.NonceSize()+len(plaintext)+chacha20poly1305.Overhead)
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("seal %s: generate nonce: %w", where, err)
	}
	sealed := k.current.aead.Seal(nonce, nonce, plaintext, associatedData(header, where))
	return header + base64.RawURLEncoding.EncodeToString(sealed), nil
}

// Open decrypts a sealed value that was bound to where. It fails with
// ErrNotSealed for a value in another format, an *UnknownKeyError when the
// key is not in the keyring, and a plain error when the value was changed or
// belongs somewhere else. Errors never contain the value.
func (k *Keyring) Open(sealed, where string) ([]byte, error) {
	id, body, err := split(sealed)
	if err != nil {
		return nil, err
	}
	key, ok := k.byID[id]
	if !ok {
		return nil, &UnknownKeyError{KeyID: id}
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || len(raw) < key.aead.NonceSize()+chacha20poly1305.Overhead {
		return nil, fmt.Errorf("the encrypted value of %s is malformed", where)
	}
	n := key.aead.NonceSize()
	plain, err := key.aead.Open(nil, raw[:n], raw[n:], associatedData(Prefix+id+":", where))
	if err != nil {
		return nil, fmt.Errorf("the encrypted value of %s does not decrypt with key %s: it was altered or copied from another row", where, id)
	}
	return plain, nil
}

// IsSealed reports whether value is in the sealed format.
func IsSealed(value string) bool { return strings.HasPrefix(value, Prefix) }

// SealedKeyID returns the id of the key a sealed value was sealed with.
func SealedKeyID(sealed string) (string, error) {
	id, _, err := split(sealed)
	return id, err
}

func split(sealed string) (id, body string, err error) {
	if !IsSealed(sealed) {
		return "", "", ErrNotSealed
	}
	id, body, ok := strings.Cut(strings.TrimPrefix(sealed, Prefix), ":")
	if !ok || len(id) != 8 || body == "" {
		return "", "", errors.New("the encrypted value is malformed: want " + Prefix + "<key id>:<data>")
	}
	return id, body, nil
}

func associatedData(header, where string) []byte {
	return []byte(header + where)
}
