package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/db"
)

// LoginLimits throttles password guessing. Failed logins are counted in the
// catalog, per user name and per client address, so every replica sees the
// same counts; bcrypt work is bounded per process.
type LoginLimits struct {
	// UserFailures is how many failed logins one user name may have within
	// Window before further logins of that user are refused with 429.
	// Defaults to 5.
	UserFailures int
	// AddressFailures is the same limit per client address: the TCP peer,
	// or the X-Forwarded-For client of a request from a TrustedProxies
	// address. Defaults to 20.
	AddressFailures int
	// Window is the sliding window failures are counted in. Defaults to 15
	// minutes.
	Window time.Duration
	// Concurrency is how many password checks (bcrypt) one process runs at
	// once. Defaults to the number of CPUs.
	Concurrency int
	// Wait is how long a password check waits for a free slot before the
	// request is refused with 429. Defaults to 2 seconds.
	Wait time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For header is
	// believed. Empty (the default): the header is ignored.
	TrustedProxies []netip.Prefix
}

func (l LoginLimits) withDefaults() LoginLimits {
	l.UserFailures = cmp.Or(l.UserFailures, 5)
	l.AddressFailures = cmp.Or(l.AddressFailures, 20)
	l.Window = cmp.Or(l.Window, 15*time.Minute)
	l.Concurrency = cmp.Or(l.Concurrency, runtime.NumCPU())
	l.Wait = cmp.Or(l.Wait, 2*time.Second)
	return l
}

// loginGuard applies LoginLimits.
type loginGuard struct {
	store  *db.Store
	limits LoginLimits
	// slots holds one token per password check in progress.
	slots chan struct{}
}

func newLoginGuard(store *db.Store, limits LoginLimits) *loginGuard {
	limits = limits.withDefaults()
	return &loginGuard{store: store, limits: limits, slots: make(chan struct{}, limits.Concurrency)}
}

func subjects(username, addr string) []db.LoginSubject {
	subs := []db.LoginSubject{{Kind: db.LoginSubjectUser, Value: username}}
	if addr != "" {
		subs = append(subs, db.LoginSubject{Kind: db.LoginSubjectAddress, Value: addr})
	}
	return subs
}

// throttled reports whether the user name or the client address has used
// up its failed logins: it names which one (who is "" when the login may go
// ahead) and in how many seconds logins open again.
func (g *loginGuard) throttled(ctx context.Context, username, addr string) (who string, retryAfter int, err error) {
	failures, now, err := g.store.LoginFailures(ctx, g.limits.Window, subjects(username, addr)...)
	if err != nil {
		return "", 0, err
	}
	var wait time.Duration
	for sub, times := range failures {
		limit := g.limits.UserFailures
		if sub.Kind == db.LoginSubjectAddress {
			limit = g.limits.AddressFailures
		}
		if len(times) < limit {
			continue
		}
		// Logins open again when the limit-th newest failure leaves the window.
		if w := times[limit-1].Add(g.limits.Window).Sub(now); w > wait {
			wait = w
			who = "user " + strconv.Quote(sub.Value)
			if sub.Kind == db.LoginSubjectAddress {
				who = "your address " + sub.Value
			}
		}
	}
	if who == "" {
		return "", 0, nil
	}
	return who, int(math.Ceil(max(wait, time.Second).Seconds())), nil
}

// fail records a failed login of username from addr.
func (g *loginGuard) fail(ctx context.Context, username, addr string) error {
	return g.store.LoginFailureRecord(ctx, g.limits.Window, subjects(username, addr)...)
}

// succeed forgets the user's failed logins (not the address's: a valid
// account of its own must not let an address reset its count).
func (g *loginGuard) succeed(ctx context.Context, username string) error {
	return g.store.LoginFailuresClear(ctx, db.LoginSubject{Kind: db.LoginSubjectUser, Value: username})
}

// acquire takes a password check slot, waiting at most limits.Wait; it
// returns the release function, or a 429 when the process is busy with
// other password checks.
func (g *loginGuard) acquire(ctx context.Context) (func(), error) {
	timer := time.NewTimer(g.limits.Wait)
	defer timer.Stop()
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	case <-timer.C:
		return nil, tooManyRequests(1, "Too many logins at once: try again in 1 second")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tooManyRequests is a 429 with a Retry-After header in seconds.
func tooManyRequests(retryAfter int, format string, args ...any) error {
	return &apiError{status: http.StatusTooManyRequests, headers: http.Header{"Retry-After": {strconv.Itoa(retryAfter)}},
		Message: fmt.Sprintf(format, args...)}
}

type clientAddrKey struct{}

// clientAddr returns the request's client address, as the auth middleware
// stored it (see clientAddress).
func clientAddr(ctx context.Context) string {
	addr, _ := ctx.Value(clientAddrKey{}).(string)
	return addr
}

// clientAddress returns the address failed logins of a request are counted
// by: the TCP peer of the connection, or, when that peer is one of the
// trusted proxies, the rightmost X-Forwarded-For address that is not a
// trusted proxy. An IPv6 address counts as its /64 network, since one client
// usually holds a whole /64.
func clientAddress(remoteAddr string, forwardedFor []string, trusted []netip.Prefix) string {
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	addr = addr.Unmap()
	if isTrusted(addr, trusted) {
		// X-Forwarded-For may be sent several times and lists client, proxy1,
		// proxy2, ...: walk it from the right, past our own proxies.
		var hops []string
		for _, header := range forwardedFor {
			for _, hop := range strings.Split(header, ",") {
				hops = append(hops, strings.TrimSpace(hop))
			}
		}
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(hops[i])
			if err != nil {
				break
			}
			addr = hop.Unmap()
			if !isTrusted(addr, trusted) {
				break
			}
		}
	}
	if addr.Is6() {
		return netip.PrefixFrom(addr, 64).Masked().String()
	}
	return addr.String()
}

func isTrusted(addr netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
