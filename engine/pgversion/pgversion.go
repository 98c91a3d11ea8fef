// Package pgversion says what a PostgreSQL server can do, by its
// server_version_num: the one place where pgmirror decides which catalog
// columns, pgoutput options and functions it may use on a peer.
//
// pgmirror supports PostgreSQL 12 and later on either side of a mirror
// (MinSupported). What differs between 12 and 18 and matters to it:
//
//   - pgoutput's binary and messages options (14), its origin option (16);
//     servers refuse options they do not know.
//   - Transactions without published changes: pgoutput up to 14 sends
//     them as an empty BEGIN/COMMIT, from 15 it leaves them out. A
//     transactional logical decoding message (pg_logical_emit_message)
//     therefore reaches a stream either as a Message (messages option, 14+)
//     or as the empty transaction that carries it (12 to 14): markers,
//     heartbeats and verification holds work on every supported source.
//   - Catalog columns: pg_type.typsubscript and pg_range.rngmultitypid
//     (14), pg_replication_slots.wal_status (13), pg_current_xact_id (13),
//     pg_attribute.attgenerated 'v' (virtual generated columns, 18), the
//     publication option publish_generated_columns (18).
package pgversion

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MinSupported is the oldest server_version_num pgmirror works with.
const MinSupported = 120000

// ErrUnsupported matches (errors.Is) the error of Check for a server older
// than MinSupported.
var ErrUnsupported = errors.New("unsupported PostgreSQL version")

// Querier runs a query returning one row; *pgx.Conn, *pgxpool.Pool and
// pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Server is a server's version (server_version_num, for example 130023 for
// 13.23) and what follows from it.
type Server struct {
	Num int
}

// Of returns the Server of a server_version_num.
func Of(num int) Server { return Server{Num: num} }

// Read returns the version of q's server: on a connection, or a
// transaction on one, from the server_version the server reported at login
// (no round trip: a run's setup asks many times); otherwise, or when that
// does not parse, by asking the server.
func Read(ctx context.Context, q Querier) (Server, error) {
	var conn *pgx.Conn
	switch c := q.(type) {
	case *pgx.Conn:
		conn = c
	case interface{ Conn() *pgx.Conn }: // pgx.Tx
		conn = c.Conn()
	}
	if conn != nil && conn.PgConn() != nil {
		if num, ok := ParseServerVersion(conn.PgConn().ParameterStatus("server_version")); ok {
			return Server{Num: num}, nil
		}
	}
	var num int
	if err := q.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int`).Scan(&num); err != nil {
		return Server{}, fmt.Errorf("read the server's version: %w", err)
	}
	return Server{Num: num}, nil
}

// Major is the major version (13 for 13.23).
func (s Server) Major() int { return s.Num / 10000 }

// String gives the version as PostgreSQL prints it: "PostgreSQL 13.23".
func (s Server) String() string {
	if s.Num < 100000 { // 9.6.24 is 90624
		return fmt.Sprintf("PostgreSQL %d.%d.%d", s.Num/10000, s.Num/100%100, s.Num%100)
	}
	return fmt.Sprintf("PostgreSQL %d.%d", s.Num/10000, s.Num%10000)
}

// Check returns an error matching ErrUnsupported, naming the minimum, when
// the server is older than MinSupported. role names the peer in the message
// ("source", "destination", or a peer's name).
func (s Server) Check(role string) error {
	if s.Num >= MinSupported {
		return nil
	}
	return fmt.Errorf("%w: the %s runs %s, and pgmirror needs PostgreSQL %d or later on both sides of a mirror (logical replication with pgoutput as pgmirror uses it); upgrade that server or choose another peer",
		ErrUnsupported, role, s, MinSupported/10000)
}

// Supported reports whether the server is MinSupported or later.
func (s Server) Supported() bool { return s.Num >= MinSupported }

// BinaryOutput: pgoutput accepts binary 'true' (14).
func (s Server) BinaryOutput() bool { return s.Num >= 140000 }

// Messages: pgoutput accepts messages 'true' and sends logical decoding
// messages (14).
func (s Server) Messages() bool { return s.Num >= 140000 }

// SendsEmptyTransactions: pgoutput sends transactions that hold no
// published change as an empty BEGIN/COMMIT (up to 14; from 15 it leaves
// them out).
func (s Server) SendsEmptyTransactions() bool { return s.Num < 150000 }

// Markers: a transactional logical decoding message written on the server
// reaches a pgoutput stream on its slot, as a Message (Messages) or as the
// empty transaction that carries it (SendsEmptyTransactions). True on every
// supported server; a stream asks for messages only where Messages is true.
func (s Server) Markers() bool { return s.Messages() || s.SendsEmptyTransactions() }

// SchemaMessages: captured DDL, whose statements travel in the content of
// logical decoding messages, can reach the stream (Messages, 14).
func (s Server) SchemaMessages() bool { return s.Messages() }

// Streaming: pgoutput streams in-progress transactions (proto_version 2,
// streaming 'true', 14).
func (s Server) Streaming() bool { return s.Num >= 140000 }

// OriginOption: pgoutput accepts origin 'none' / 'any' (16).
func (s Server) OriginOption() bool { return s.Num >= 160000 }

// Multiranges: pg_type.typsubscript and pg_range.rngmultitypid exist (14).
func (s Server) Multiranges() bool { return s.Num >= 140000 }

// WALStatus: pg_replication_slots has wal_status (13).
func (s Server) WALStatus() bool { return s.Num >= 130000 }

// XactID: pg_current_xact_id() exists (13; txid_current() before).
func (s Server) XactID() bool { return s.Num >= 130000 }

// VirtualGenerated: generated columns may be VIRTUAL (attgenerated 'v'),
// the default of GENERATED ALWAYS AS (expr) (18).
func (s Server) VirtualGenerated() bool { return s.Num >= 180000 }

// PublishGeneratedColumns: publications have publish_generated_columns
// (18).
func (s Server) PublishGeneratedColumns() bool { return s.Num >= 180000 }

// StatReplicationSlots: the view pg_stat_replication_slots exists (14).
func (s Server) StatReplicationSlots() bool { return s.Num >= 140000 }

// HashTextExtended: hashtextextended() exists (11).
func (s Server) HashTextExtended() bool { return s.Num >= 110000 }

// PartitionRoot: a publication may publish a partitioned table, and
// publish_via_partition_root sends its partitions' changes under its name
// (13; PostgreSQL 12 publishes partitions only, one by one).
func (s Server) PartitionRoot() bool { return s.Num >= 130000 }

// TriggerParent: pg_trigger.tgparentid exists (13); PostgreSQL 12 marks a
// partitioned table's trigger copies on its partitions internal instead.
func (s Server) TriggerParent() bool { return s.Num >= 130000 }

// ReplaceTrigger reports CREATE OR REPLACE TRIGGER (14+).
func (s Server) ReplaceTrigger() bool { return s.Num >= 140000 }

// ParseServerVersion turns a server_version ("15.4", "15.4 (Debian
// 15.4-1.pgdg120+1)", "9.6.24", "18beta1", "17devel") into the
// server_version_num it goes with (150004, 90624, 180000, 170000); false
// when it does not start with a version.
func ParseServerVersion(v string) (int, bool) {
	var parts []int
	n, digits := 0, 0
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			n = n*10 + int(r-'0')
			digits++
			if digits > 6 {
				return 0, false
			}
			continue
		case r == '.' && digits > 0 && len(parts) < 2:
			parts = append(parts, n)
			n, digits = 0, 0
			continue
		}
		break
	}
	if digits > 0 {
		parts = append(parts, n)
	}
	switch {
	case len(parts) == 0:
		return 0, false
	case parts[0] >= 10: // 10 and later: major.minor
		minor := 0
		if len(parts) > 1 {
			minor = parts[1]
		}
		return parts[0]*10000 + minor, true
	case len(parts) >= 2: // 9.6.24
		patch := 0
		if len(parts) > 2 {
			patch = parts[2]
		}
		return parts[0]*10000 + parts[1]*100 + patch, true
	}
	return 0, false
}
