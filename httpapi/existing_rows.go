package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/engine/tablesync"
)

// checkDestination connects to the destination peer (which refuses the
// catalog's database) and, when the mappings' tables get a first copy
// (copies), checks their destination tables against mode: a 409 names the
// tables that hold rows under refuse, and those that hold rows but have no
// primary key under keep. A destination that cannot be reached now is no
// error here: the mirror's worker checks again before it copies.
func (h *handlers) checkDestination(ctx context.Context, dest db.Peer, mappings []change.Mapping, mode db.ExistingRows, copies bool) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := h.connectPeer(cctx, dest)
	if isRefusal(err) {
		return err
	}
	if err != nil {
		h.logger.DebugContext(ctx, "destination tables not checked: the peer cannot be reached now", "peer", dest.Name, "error", err)
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := ownership.Check(cctx, conn); errors.Is(err, ownership.ErrForeignOwner) {
		return errorf(http.StatusBadRequest, "Destination peer %q is not ready: %s", dest.Name, err)
	} else if err != nil {
		return errorf(http.StatusBadRequest, "Could not check the destination peer %q: %s", dest.Name, session.Scrub(err.Error(), conn.Config().Password))
	}
	if !copies || mode == db.ExistingRowsTruncate {
		return nil
	}
	var withRows, noKey []string
	for _, m := range mappings {
		rows, err := tablesync.HasRows(cctx, conn, m.Destination)
		if err == nil && rows && mode == db.ExistingRowsKeep {
			var key []string
			if key, err = tablesync.PrimaryKey(cctx, conn, m.Destination); err == nil && key == nil {
				noKey = append(noKey, m.Destination.String())
			}
		}
		if err != nil {
			return errorf(http.StatusBadRequest, "Could not check the destination peer %q: %s", dest.Name, session.Scrub(err.Error(), conn.Config().Password))
		}
		if rows {
			withRows = append(withRows, m.Destination.String())
		}
	}
	switch {
	case mode == db.ExistingRowsRefuse && len(withRows) > 0:
		return errorf(http.StatusConflict, "Destination %s on peer %q already %s rows, and a mirror's first copy does not replace rows it did not write "+
			"(existing_destination_rows is refuse). Set existing_destination_rows to \"truncate\" to empty them before the copy, "+
			"or to \"keep\" to copy the source's rows over them with upserts by primary key (for a destination that holds an older copy), "+
			"or empty them yourself", tableList(withRows), dest.Name, pluralVerb(len(withRows)))
	case len(noKey) > 0:
		return errorf(http.StatusConflict, "Destination %s on peer %q %s rows but no primary key, and existing_destination_rows \"keep\" "+
			"updates the existing rows by primary key. Add a primary key, set existing_destination_rows to \"truncate\", or empty them yourself",
			tableList(noKey), dest.Name, pluralVerb(len(noKey)))
	}
	return nil
}

func tableList(names []string) string {
	if len(names) == 1 {
		return "table " + names[0]
	}
	return "tables " + strings.Join(names, ", ")
}

func pluralVerb(n int) string {
	if n == 1 {
		return "holds"
	}
	return "hold"
}

// newDestinations returns the mappings whose destination table gets a
// first copy when mappings replace current: new source tables, and those
// mapped onto another destination table.
func newDestinations(current []db.MirrorTable, mappings []change.Mapping) []change.Mapping {
	dest := map[change.TableName]change.TableName{}
	for _, t := range current {
		if t.DestinationTakenAt != nil {
			dest[t.Source()] = t.Destination()
		}
	}
	var out []change.Mapping
	for _, m := range mappings {
		if d, ok := dest[m.Source]; !ok || d != m.Destination {
			out = append(out, m)
		}
	}
	return out
}

// existingRowsMode is the API's existing_destination_rows, "" for the
// default.
func existingRowsMode(s string) db.ExistingRows {
	if s == "" {
		return db.ExistingRowsRefuse
	}
	return db.ExistingRows(s)
}
