// Package session is the one place where pgmirror opens connections to a
// peer database, regular and replication, and the one place that tells a
// connection failure from other errors.
//
// Every connection starts with the same session settings (Settings): the
// text forms of dates, intervals, floats and bytea are then unambiguous and
// identical on both sides, whichever path (snapshot COPY, CDC in text, DDL
// defaults) a value takes, and text travels as UTF8 whatever each
// database's encoding. The search_path is pg_catalog, pg_temp (SearchPath),
// so that no function, operator or type a database user created is ever
// chosen in place of the one pgmirror names. application_name is "pgmirror" unless the
// configuration names one, so that pg_stat_activity shows pgmirror's
// sessions; a connection attempt gives up after ConnectTimeout unless the
// configuration sets a timeout of its own.
//
// Errors of Connect and ConnectReplication never hold the password: they
// come from pgconn, which leaves it out, and Scrub removes it from the
// connection strings that might echo it.
//
// Classify sorts an error into Unreachable (the peer did not answer, or
// went away: refused, reset, timed out, shut down), Rejected (the peer
// answered and refused the login: authentication, a missing database) or
// Other, from the error's types and SQLSTATEs, never from its text.
package session

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"regexp"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// ApplicationName is the application_name of pgmirror's sessions.
const ApplicationName = "pgmirror"

// ConnectTimeout bounds a connection attempt whose configuration sets none.
const ConnectTimeout = 10 * time.Second

// SearchPath is the search_path of every pgmirror session on a peer. The
// roles that own tables, schemas or the whole database on a peer are not
// pgmirror's users: with the default search_path ("$user", public) a
// function or operator they create in their schema can be a better match
// than the built-in one pgmirror means and would run with the peer's
// privileges (often a superuser's). pgmirror's SQL names user tables and
// types schema-qualified and quoted, and its own objects in _pgmirror.
const SearchPath = "pg_catalog, pg_temp"

// Settings returns the session parameters every pgmirror connection starts
// with.
func Settings() map[string]string {
	return map[string]string{
		// Text crosses between databases of any encodings as UTF8 (and Go
		// strings are UTF8): the server converts from and to its own.
		"client_encoding":    "UTF8",
		"DateStyle":          "ISO, YMD",
		"IntervalStyle":      "postgres",
		"extra_float_digits": "3",
		"bytea_output":       "hex",
		// Nothing a database user created can stand in for what pgmirror
		// calls: names resolve in pg_catalog only (pg_temp, listed last, is
		// never searched for functions or operators). See SearchPath.
		"search_path": SearchPath,
	}
}

// SetLocal returns the statement that sets parameter name to value for the
// rest of the transaction (SET LOCAL), value quoted as a string literal;
// the value of search_path, a list, is written as that list of names (in a
// string literal it would be read as one schema name).
func SetLocal(name, value string) string {
	if strings.EqualFold(name, "search_path") {
		names := strings.Split(value, ",")
		for i, n := range names {
			names[i] = sqlquote.Ident(strings.TrimSpace(n))
		}
		return "SET LOCAL search_path = " + strings.Join(names, ", ")
	}
	return "SET LOCAL " + sqlquote.Ident(name) + " = " + sqlquote.Literal(value)
}

// Configure returns a copy of cfg with the session settings, the
// application name (unless cfg has one) and the connect timeout (unless cfg
// has one).
func Configure(cfg *pgx.ConnConfig) *pgx.ConnConfig {
	c := cfg.Copy()
	configure(&c.Config)
	return c
}

func configure(c *pgconn.Config) {
	if c.RuntimeParams == nil {
		c.RuntimeParams = map[string]string{}
	}
	maps.Copy(c.RuntimeParams, Settings())
	if c.RuntimeParams["application_name"] == "" {
		c.RuntimeParams["application_name"] = ApplicationName
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = ConnectTimeout
	}
}

// Connect opens a regular connection with Configure(cfg).
func Connect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	c := Configure(cfg)
	cctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, c)
	if err != nil {
		return nil, scrubbed(err, c.Password)
	}
	return conn, nil
}

// ConnectReplication opens a replication connection (replication=database)
// to the database cfg configures (a copy; cfg is not changed), with the
// session settings. Its context deadlines only interrupt a read, never
// send a cancel request to the walsender: the stream's receive loop uses
// short deadlines.
func ConnectReplication(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	c := cfg.Copy()
	configure(c)
	c.RuntimeParams["replication"] = "database"
	c.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: conn.Conn()}
	}
	cctx, cancel := context.WithTimeout(ctx, c.ConnectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, c)
	if err != nil {
		return nil, scrubbed(err, c.Password)
	}
	return conn, nil
}

// scrubbedError is an error whose text had the password removed; it still
// unwraps to the original for Classify and errors.Is.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

func scrubbed(err error, password string) error {
	msg := err.Error()
	if clean := Scrub(msg, password); clean != msg {
		return &scrubbedError{msg: clean, err: err}
	}
	return err
}

// mask replaces a password.
const mask = "********"

// minSubstringScrub is the shortest password Scrub masks wherever it
// appears. A shorter one is masked only where a password can stand in a
// connection string: masking a short or common password everywhere (the
// letter a in every word, a password equal to the user name in user=...)
// would tell whoever reads the error what the password is.
const minSubstringScrub = 16

var (
	// urlPassword is the password of a connection URI's user info.
	urlPassword = regexp.MustCompile(`(://[^:/@\s]*:)[^@\s]*@`)
	// kvPassword is a password or sslpassword setting of a key/value
	// connection string or of a URI's query.
	kvPassword = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&'"]+)`)
)

// Scrub removes a password from msg: every value in the places where a
// connection string or a DSN fragment holds one (postgres://user:***@,
// password=***, sslpassword=***), whatever it is, and, for a password of at
// least 16 characters, every other occurrence of it. It does not mask a
// shorter password elsewhere in msg, so that the masking reveals nothing
// about it.
func Scrub(msg, password string) string {
	if password == "" {
		return msg
	}
	msg = urlPassword.ReplaceAllString(msg, "${1}"+mask+"@")
	msg = kvPassword.ReplaceAllString(msg, "${1}"+mask)
	if utf8.RuneCountInString(password) >= minSubstringScrub {
		msg = strings.ReplaceAll(msg, password, mask)
	}
	return msg
}

// Failure is what kind of failure an error is.
type Failure int

const (
	// Other is not a connection failure.
	Other Failure = iota
	// Unreachable: the peer did not answer or went away (refused, reset,
	// closed, timed out, shut down or restarting).
	Unreachable
	// Rejected: the peer answered and refused the session (authentication,
	// authorisation, a database that does not exist).
	Rejected
)

// Classify tells what kind of failure err is. Cancellation of the caller's
// own context is Other.
func Classify(err error) Failure {
	if err == nil || errors.Is(err, context.Canceled) {
		return Other
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "28"), pgErr.Code == "3D000":
			return Rejected
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03", strings.HasPrefix(pgErr.Code, "08"):
			// admin_shutdown, crash_shutdown, cannot_connect_now, connection exceptions
			return Unreachable
		}
		return Other
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	var retry interface{ SafeToRetry() bool }
	switch {
	case errors.As(err, &connectErr), errors.As(err, &netErr), pgconn.Timeout(err),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed), errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Unreachable
	case errors.As(err, &retry) && retry.SafeToRetry():
		// pgconn's "conn closed" and "conn busy": nothing reached the server.
		return Unreachable
	}
	return Other
}

// duplicatePreparedStatement is the SQLSTATE of a statement prepared under
// a name the session has already.
const duplicatePreparedStatement = "42P05"

// Prepare prepares sql under name on conn for the rest of the session. A
// statement the session has under that name already (prepared by an
// earlier user of the same session) is no error.
func Prepare(ctx context.Context, conn *pgconn.PgConn, name, sql string) error {
	_, err := conn.Prepare(ctx, name, sql, nil)
	var pgErr *pgconn.PgError
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == duplicatePreparedStatement) {
		return err
	}
	return nil
}
