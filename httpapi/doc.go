// Package httpapi is pgmirror's REST API: Huma v2 operations on an
// http.ServeMux, one file per resource (auth, users, peers, mirrors, mirror
// control, logs, audit, health).
//
// Handlers write desired state to the catalog (package db) and, in the same
// transaction, enqueue the River job that acts on it; they never run
// replication themselves. Catalog and engine errors become HTTP errors here
// and nowhere else.
//
// Every error response, including validation failures (answered 400, not
// Huma's 422), malformed JSON, unknown routes (404), wrong methods (405) and
// oversized bodies (413), has the body {"error": "message"}. A 500 never
// carries internal error text: the cause is logged with the request.
//
// Operations carry one of three permission levels: open, authed (any valid
// token) and adminOnly. One middleware enforces them from each operation's
// security metadata. Tokens are HS256 JWTs that name the user and carry the
// user's token version. As the API specification says, by default they do
// not expire and a password change leaves them valid; Config.TokenTTL gives
// them an expiry and Config.RevokeTokensOnPasswordChange makes a password
// change revoke them. The user is loaded from the catalog on every request,
// so deleting a user revokes its tokens at once, and so does an increment of
// its token version (a role change, or a password change with revocation
// on). Logins are throttled per user name and client address
// with counts kept in the catalog, and password checks are bounded per
// process (throttle.go).
//
// Every operation that changes something is recorded in the catalog's audit
// log with the acting user and the response status (audit.go): in the
// change's own transaction where the handler has one (users, mirrors and
// control operations), otherwise by the middleware once the status is known.
// GET /v1/audit reads it.
//
// /openapi.json describes the API and /docs renders it with an embedded page
// that needs no network access.
package httpapi
