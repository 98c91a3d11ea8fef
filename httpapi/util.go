package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
