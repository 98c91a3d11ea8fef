package httpapi

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClientAddress(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, c := range []struct {
		name, remote string
		xff          []string
		trusted      []netip.Prefix
		want         string
	}{
		{"plain v4", "203.0.113.7:5544", nil, nil, "203.0.113.7"},
		{"header ignored without trusted proxies", "10.1.2.3:80", []string{"198.51.100.1"}, nil, "10.1.2.3"},
		{"header ignored from an untrusted peer", "203.0.113.7:1", []string{"198.51.100.1"}, proxies, "203.0.113.7"},
		{"client behind a trusted proxy", "10.1.2.3:80", []string{"198.51.100.1"}, proxies, "198.51.100.1"},
		{"a forged leftmost hop does not count", "10.1.2.3:80", []string{"1.1.1.1, 198.51.100.1, 10.9.9.9"}, proxies, "198.51.100.1"},
		{"several headers", "10.1.2.3:80", []string{"1.1.1.1", "198.51.100.1"}, proxies, "198.51.100.1"},
		{"garbage hop stops the walk", "10.1.2.3:80", []string{"198.51.100.1, junk"}, proxies, "10.1.2.3"},
		{"only proxies", "10.1.2.3:80", []string{"10.4.4.4"}, proxies, "10.4.4.4"},
		{"v6 counts as its /64", "[2001:db8:1:2:aaaa::1]:443", nil, nil, "2001:db8:1:2::/64"},
		{"v4-mapped v6", "[::ffff:203.0.113.7]:443", nil, nil, "203.0.113.7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, clientAddress(c.remote, c.xff, c.trusted))
		})
	}
}
