package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/session"
)

// connectTimeout bounds every connection the API opens to a peer.
const connectTimeout = 10 * time.Second

type peerBody struct {
	Name     string     `json:"name"`
	Host     string     `json:"host"`
	Port     int        `json:"port"`
	User     string     `json:"user"`
	Database string     `json:"database"`
	SSLMode  db.SSLMode `json:"ssl_mode"`
	// HasSSLRootCert tells whether a CA certificate is set; the certificate
	// itself is write-only.
	HasSSLRootCert bool      `json:"has_ssl_root_cert" doc:"Whether a CA certificate (ssl_root_cert) is set for the peer."`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

func peerResponse(p db.Peer) peerBody {
	return peerBody{Name: p.Name, Host: p.Host, Port: p.Port, User: p.User, Database: p.Database,
		SSLMode: p.SSLMode, HasSSLRootCert: p.HasSSLRootCert, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}
}

// sslRootCertDoc documents the ssl_root_cert field of create and update.
const sslRootCertDoc = "PEM CA certificate(s) that verify the server's certificate with ssl_mode verify-ca or verify-full " +
	"(and require, which then acts as verify-ca) instead of the system's trust store. Stored encrypted; write-only: " +
	"responses only say has_ssl_root_cert. On update, an empty string removes it."

// checkRootCert answers 400 unless pemText is empty or parseable CA
// certificates.
func checkRootCert(pemText *string) error {
	if pemText == nil || *pemText == "" {
		return nil
	}
	if _, err := db.ParseRootCerts(*pemText); err != nil {
		return errorf(http.StatusBadRequest, "ssl_root_cert is not usable: %s", err)
	}
	return nil
}

type peerOutput struct {
	Body peerBody
}

type peerListOutput struct {
	Body []peerBody
}

type peerCreateInput struct {
	Body struct {
		Name        string     `json:"name" minLength:"1" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9_.-]*$" patternDescription:"letters, digits, '_', '.' and '-', starting with a letter or digit" doc:"Unique peer name, used in paths."`
		Host        string     `json:"host" minLength:"1" maxLength:"255" doc:"One host name or IP address, without a port (a Unix-socket directory only when the service allows it)."`
		Port        int        `json:"port" minimum:"1" maximum:"65535"`
		User        string     `json:"user" minLength:"1" maxLength:"128"`
		Password    string     `json:"password" maxLength:"1024" doc:"Write-only: never returned."`
		Database    string     `json:"database" minLength:"1" maxLength:"128"`
		SSLMode     db.SSLMode `json:"ssl_mode,omitempty" default:"prefer"`
		SSLRootCert string     `json:"ssl_root_cert,omitempty" maxLength:"65536" doc:"PEM CA certificate(s); see the description of create-peer."`
	}
}

type peerUpdateInput struct {
	Name string `path:"name"`
	Body struct {
		Host        *string     `json:"host,omitempty" minLength:"1" maxLength:"255"`
		Port        *int        `json:"port,omitempty" minimum:"1" maximum:"65535"`
		User        *string     `json:"user,omitempty" minLength:"1" maxLength:"128"`
		Password    *string     `json:"password,omitempty" maxLength:"1024" doc:"Write-only: never returned."`
		Database    *string     `json:"database,omitempty" minLength:"1" maxLength:"128"`
		SSLMode     *db.SSLMode `json:"ssl_mode,omitempty"`
		SSLRootCert *string     `json:"ssl_root_cert,omitempty" maxLength:"65536" doc:"PEM CA certificate(s); an empty string removes them."`
	}
}

type peerPath struct {
	Name string `path:"name" doc:"Peer name."`
}

type tableRef struct {
	Schema    string `json:"schema"`
	TableName string `json:"table_name"`
}

type tableListOutput struct {
	Body []tableRef
}

type peerTestOutput struct {
	Body struct {
		Success bool   `json:"success"`
		Version string `json:"version,omitempty" doc:"PostgreSQL server version; present when successful."`
		Error   string `json:"error,omitempty" doc:"Why the connection failed, or why pgmirror cannot use the database (its schema _pgmirror owned by another role); present when not successful."`
	}
}

func (h *handlers) registerPeers(api huma.API) {
	register(api, authed, huma.Operation{
		OperationID: "list-peers", Method: http.MethodGet, Path: "/v1/peers", Tags: []string{"Peers"},
		Summary: "List peers", Description: "Connection details of every peer; never the password.",
	}, h.listPeers)
	register(api, adminOnly, huma.Operation{
		OperationID: "create-peer", Method: http.MethodPost, Path: "/v1/peers", Tags: []string{"Peers"}, MaxBodyBytes: peerMaxBody,
		Summary: "Create a peer", DefaultStatus: http.StatusCreated,
		Description: "The password is stored encrypted and never returned. ssl_root_cert: " + sslRootCertDoc,
		Errors:      []int{http.StatusBadRequest, http.StatusConflict},
	}, h.createPeer)
	register(api, authed, huma.Operation{
		OperationID: "get-peer", Method: http.MethodGet, Path: "/v1/peers/{name}", Tags: []string{"Peers"},
		Summary: "Get a peer", Errors: []int{http.StatusNotFound},
	}, h.getPeer)
	register(api, adminOnly, huma.Operation{
		OperationID: "update-peer", Method: http.MethodPut, Path: "/v1/peers/{name}", Tags: []string{"Peers"}, MaxBodyBytes: peerMaxBody,
		Summary:     "Update a peer",
		Description: "Changes the given fields only. Mirrors using the peer pick the change up when they next connect; pause them first. ssl_root_cert: " + sslRootCertDoc,
		Errors:      []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.updatePeer)
	register(api, adminOnly, huma.Operation{
		OperationID: "delete-peer", Method: http.MethodDelete, Path: "/v1/peers/{name}", Tags: []string{"Peers"},
		Summary: "Delete a peer", Description: "Refused (409) while any mirror, including one being deleted, uses the peer.",
		Errors: []int{http.StatusNotFound, http.StatusConflict},
	}, h.deletePeer)
	register(api, authed, huma.Operation{
		OperationID: "list-peer-tables", Method: http.MethodGet, Path: "/v1/peers/{name}/tables", Tags: []string{"Peers"},
		Summary: "List a peer's tables", Description: "User tables and partitioned tables (not their partitions) of the peer database.",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.peerTables)
	register(api, adminOnly, huma.Operation{
		OperationID: "test-peer", Method: http.MethodPost, Path: "/v1/peers/{name}/test", Tags: []string{"Peers"},
		Summary:     "Test a peer's connection",
		Description: "Connects with the peer's settings (10 s timeout). A failed connection is reported with success false and HTTP 200.",
		Errors:      []int{http.StatusNotFound},
	}, h.testPeer)
}

func (h *handlers) listPeers(ctx context.Context, _ *struct{}) (*peerListOutput, error) {
	peers, err := h.store.PeerList(ctx)
	if err != nil {
		return nil, h.internal(ctx, "list peers", err)
	}
	out := &peerListOutput{Body: make([]peerBody, 0, len(peers))}
	for _, p := range peers {
		out.Body = append(out.Body, peerResponse(p))
	}
	return out, nil
}

func (h *handlers) createPeer(ctx context.Context, in *peerCreateInput) (*peerOutput, error) {
	b := in.Body
	setAuditTarget(ctx, b.Name)
	if err := h.checkPeerHost(b.Host); err != nil {
		return nil, err
	}
	if err := checkNames(map[string]*string{"user": &b.User, "database": &b.Database}); err != nil {
		return nil, err
	}
	if err := checkRootCert(&b.SSLRootCert); err != nil {
		return nil, err
	}
	draft, err := h.store.DraftPeer(db.PeerCreateParams{Name: b.Name, Host: b.Host, Port: b.Port, User: b.User,
		Password: b.Password, Database: b.Database, SSLMode: b.SSLMode, SSLRootCert: b.SSLRootCert})
	if err != nil {
		return nil, h.internal(ctx, "encrypt the peer's secrets", err)
	}
	if err := h.refuseCatalogPeer(ctx, draft); err != nil {
		return nil, err
	}
	p, err := h.store.PeerCreate(ctx, db.PeerCreateParams{Name: b.Name, Host: b.Host, Port: b.Port, User: b.User,
		Password: b.Password, Database: b.Database, SSLMode: b.SSLMode, SSLRootCert: b.SSLRootCert})
	if db.Violates(err, db.ConstraintPeerName) {
		return nil, errorf(http.StatusConflict, "Peer %q already exists: choose another name or update it with PUT /v1/peers/%s", b.Name, b.Name)
	}
	if err != nil {
		return nil, h.internal(ctx, "create the peer", err)
	}
	return &peerOutput{Body: peerResponse(p)}, nil
}

// peer loads a peer by name, answering 404 when it does not exist.
func (h *handlers) peer(ctx context.Context, name string) (db.Peer, error) {
	p, err := h.store.PeerGetByName(ctx, name)
	if errors.Is(err, db.ErrNotFound) {
		return db.Peer{}, errorf(http.StatusNotFound, "Peer %q does not exist", name)
	}
	if err != nil {
		return db.Peer{}, h.internal(ctx, "load the peer", err)
	}
	return p, nil
}

func (h *handlers) getPeer(ctx context.Context, in *peerPath) (*peerOutput, error) {
	p, err := h.peer(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	return &peerOutput{Body: peerResponse(p)}, nil
}

func (h *handlers) updatePeer(ctx context.Context, in *peerUpdateInput) (*peerOutput, error) {
	b := in.Body
	setAuditDetails(ctx, map[string]any{"fields": changedFields(map[string]bool{"host": b.Host != nil, "port": b.Port != nil,
		"user": b.User != nil, "password": b.Password != nil, "database": b.Database != nil, "ssl_mode": b.SSLMode != nil,
		"ssl_root_cert": b.SSLRootCert != nil})})
	if b.Host != nil {
		if err := h.checkPeerHost(*b.Host); err != nil {
			return nil, err
		}
	}
	if err := checkNames(map[string]*string{"user": b.User, "database": b.Database}); err != nil {
		return nil, err
	}
	if err := checkRootCert(b.SSLRootCert); err != nil {
		return nil, err
	}
	upd := db.PeerUpdateParams{Host: b.Host, Port: b.Port, User: b.User,
		Password: b.Password, Database: b.Database, SSLMode: b.SSLMode, SSLRootCert: b.SSLRootCert}
	current, err := h.peer(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	draft, err := h.store.DraftPeerUpdate(current, upd)
	if err != nil {
		return nil, h.internal(ctx, "encrypt the peer's secrets", err)
	}
	if err := h.refuseCatalogPeer(ctx, draft); err != nil {
		return nil, err
	}
	p, err := h.store.PeerUpdate(ctx, in.Name, upd)
	if errors.Is(err, db.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, "Peer %q does not exist", in.Name)
	}
	if err != nil {
		return nil, h.internal(ctx, "update the peer", err)
	}
	return &peerOutput{Body: peerResponse(p)}, nil
}

func (h *handlers) deletePeer(ctx context.Context, in *peerPath) (*deletedOutput, error) {
	err := h.store.PeerDelete(ctx, in.Name)
	var inUse *db.PeerInUseError
	switch {
	case err == nil:
		return deleted(in.Name), nil
	case errors.Is(err, db.ErrNotFound):
		return nil, errorf(http.StatusNotFound, "Peer %q does not exist", in.Name)
	case errors.As(err, &inUse) && inUse.Deleting:
		return nil, errorf(http.StatusConflict, "Peer %q is used by mirror %q, which is being deleted: try again once its cleanup has finished", in.Name, inUse.Mirror)
	case errors.As(err, &inUse):
		return nil, errorf(http.StatusConflict, "Peer %q is used by mirror %q: delete that mirror first", in.Name, inUse.Mirror)
	case errors.Is(err, db.ErrConflict):
		return nil, errorf(http.StatusConflict, "Peer %q is used by a mirror: delete the mirror first", in.Name)
	default:
		return nil, h.internal(ctx, "delete the peer", err)
	}
}

// connectPeer opens a connection to p with its settings and a 10 second
// timeout, and refuses a peer that is the catalog database itself with an
// *apiError (400) to return as it is. The text of any other error, a
// connection failure, is safe to show: it never holds the password.
func (h *handlers) connectPeer(ctx context.Context, p db.Peer) (*pgx.Conn, error) {
	conn, err := dialPeer(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := h.refuseCatalog(ctx, p, conn); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// dialPeer opens a connection to p with its settings and a 10 second
// timeout. The error text is safe to show: it never holds the password. A
// server certificate that does not verify gets a hint about ssl_root_cert.
func dialPeer(ctx context.Context, p db.Peer) (*pgx.Conn, error) {
	cfg, err := p.ConnConfig()
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = connectTimeout
	conn, err := session.Connect(ctx, cfg)
	if err != nil {
		return nil, errors.New(session.Scrub(err.Error(), cfg.Password) + certificateHint(err, p))
	}
	return conn, nil
}

// certificateHint says what to do when err is a failed check of the peer's
// server certificate.
func certificateHint(err error, p db.Peer) string {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	switch {
	case errors.As(err, &hostname):
		return fmt.Sprintf(" (the server certificate does not name host %q: connect with the host name it names, or use ssl_mode verify-ca to check the CA only)", p.Host)
	case errors.As(err, &unknown) && !p.HasSSLRootCert:
		return " (the server certificate is not signed by a trusted CA: set ssl_root_cert to the PEM certificate of the CA that signed it)"
	case errors.As(err, &verify) || errors.As(err, &unknown):
		return " (the server certificate does not verify: check that ssl_root_cert holds the CA that signed it)"
	}
	return ""
}

func (h *handlers) peerTables(ctx context.Context, in *peerPath) (*tableListOutput, error) {
	p, err := h.peer(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	tables, err := h.listPeerTables(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &tableListOutput{Body: make([]tableRef, 0, len(tables))}
	for _, t := range tables {
		out.Body = append(out.Body, tableRef{Schema: t.Schema, TableName: t.Name})
	}
	return out, nil
}

func (h *handlers) listPeerTables(ctx context.Context, p db.Peer) ([]change.TableName, error) {
	conn, err := h.connectPeer(ctx, p)
	if isRefusal(err) {
		return nil, err
	}
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "Could not connect to peer %q: %s", p.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tables, err := preflight.UserTables(qctx, conn)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "Could not list the tables of peer %q: %s", p.Name, session.Scrub(err.Error(), conn.Config().Password))
	}
	return tables, nil
}

func (h *handlers) testPeer(ctx context.Context, in *peerPath) (*peerTestOutput, error) {
	p, err := h.peer(ctx, in.Name)
	if err != nil {
		return nil, err
	}
	out := &peerTestOutput{}
	conn, err := h.connectPeer(ctx, p)
	if isRefusal(err) {
		return nil, err
	}
	if err != nil {
		out.Body.Error = err.Error()
		return out, nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	var num int
	if err := conn.QueryRow(qctx, `SELECT pg_catalog.current_setting('server_version'), pg_catalog.current_setting('server_version_num')::int`).Scan(&out.Body.Version, &num); err != nil {
		out.Body.Error = fmt.Sprintf("connected, but could not read the server version: %s", session.Scrub(err.Error(), conn.Config().Password))
		out.Body.Version = ""
		return out, nil
	}
	if err := pgversion.Of(num).Check("peer"); err != nil {
		// Connected, but no mirror can use it: a failed test that says why.
		out.Body.Error = "connected, but " + strings.TrimPrefix(err.Error(), pgversion.ErrUnsupported.Error()+": ")
		out.Body.Version = ""
		return out, nil
	}
	if err := ownership.Check(qctx, conn); err != nil {
		out.Body.Error = fmt.Sprintf("connected, but pgmirror cannot use this database: %s", session.Scrub(err.Error(), conn.Config().Password))
		out.Body.Version = ""
		return out, nil
	}
	out.Body.Success = true
	return out, nil
}

// checkPeerHost answers 400 unless host is one host name or IP address, or,
// when the operator allows it (SERVICE_ALLOW_SOCKET_PEERS), the absolute
// path of a Unix-socket directory. A list of hosts is never accepted.
func (h *handlers) checkPeerHost(host string) error {
	switch {
	case strings.Contains(host, ","):
		return errorf(http.StatusBadRequest, "Invalid request: host: %q is a list of hosts; give one host name or IP address", host)
	case strings.HasPrefix(host, "/") && h.allowSocketPeers && !strings.ContainsRune(host, 0):
		return nil
	case strings.HasPrefix(host, "/"), strings.HasPrefix(host, "@"):
		return errorf(http.StatusBadRequest, "Invalid request: host: %q is a Unix-socket path; use a host name or IP address (a socket can log in as pgmirror's own operating-system user; the operator can allow sockets with SERVICE_ALLOW_SOCKET_PEERS=true)", host)
	case !ValidHost(host):
		return errorf(http.StatusBadRequest, "Invalid request: host: %q is not a host name or IP address; use for example db.example.com, 10.0.0.5 or ::1 (without a port: that is the port field)", host)
	}
	return nil
}

// ValidHost reports whether host is an IP address (IPv6 without brackets)
// or a DNS host name: labels of letters, digits, '-' and '_', 1 to 63
// characters each, not starting or ending with '-', separated by dots, at
// most 253 characters.
func ValidHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
