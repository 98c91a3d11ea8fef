package httpapi

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/pgmirror/pgmirror/db"
)

// mirrorListInput is the optional filter, order and page of GET
// /v1/mirrors. Without any of them the answer is every mirror by name.
type mirrorListInput struct {
	Status []db.MirrorStatus `query:"status,explode" doc:"Only mirrors in this status; repeat the parameter for several (status=running&status=error) or give a comma list (status=running,error)."`
	Q      string            `query:"q" maxLength:"256" doc:"Only mirrors whose name, source peer or destination peer contains this text, ignoring case."`
	Sort   string            `query:"sort" enum:"name,-name,status,-status,lag,-lag,created,-created" default:"name" doc:"Order: name, status (in the order of a mirror's life: initializing, snapshotting, running, paused, error, stopped, completed), lag (mirrors without a lag last) or created (creation time); a leading - reverses it. Ties are ordered by name."`
	Limit  int               `query:"limit" minimum:"1" maximum:"1000" doc:"At most this many mirrors (1 to 1000); without it, every matching mirror."`
	Offset int               `query:"offset" minimum:"0" default:"0" doc:"Number of matching mirrors skipped, in the chosen order. Page by increasing offset until it reaches X-Total-Count."`
}

type mirrorListOutput struct {
	TotalCount   int    `header:"X-Total-Count" doc:"Mirrors matching status and q, on all pages."`
	StatusTotals string `header:"X-Status-Totals" doc:"Mirrors of the whole fleet by status, whatever the filter: every status with its count, as status=count pairs separated by commas (initializing=0, snapshotting=1, running=40, ...)."`
	Body         []mirrorSummary
}

// commaLists is the middleware that lets the repeatable status parameter
// of GET /v1/mirrors also come as a comma list (status=running,error): it
// splits such values into repeated parameters before Huma parses and
// validates them, each against the vocabulary.
func commaLists(ctx huma.Context, next func(huma.Context)) {
	if ctx.Operation().OperationID != "list-mirrors" || !strings.Contains(ctx.Query("status"), ",") {
		next(ctx)
		return
	}
	r, _ := humago.Unwrap(ctx)
	q := r.URL.Query()
	var split []string
	for _, v := range q["status"] {
		split = append(split, strings.Split(v, ",")...)
	}
	q["status"] = split
	r.URL.RawQuery = q.Encode()
	next(ctx)
}

func (h *handlers) listMirrors(ctx context.Context, in *mirrorListInput) (*mirrorListOutput, error) {
	mirrors, err := h.store.MirrorList(ctx)
	if err != nil {
		return nil, h.internal(ctx, "list mirrors", err)
	}
	workers, err := h.store.MirrorWorkers(ctx)
	if err != nil {
		return nil, h.internal(ctx, "read the mirrors' workers", err)
	}
	problems, err := h.peerProblems(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := h.store.MirrorRowsSynced(ctx)
	if err != nil {
		return nil, h.internal(ctx, "sum the mirrors' rows", err)
	}
	totals := map[db.MirrorStatus]int{}
	q := strings.ToLower(in.Q)
	list := make([]mirrorSummary, 0, len(mirrors))
	unsure := h.lagBoard.Unsure(time.Now())
	for _, m := range mirrors {
		m = h.lagBoard.Newest(m)
		totals[m.Status]++
		if len(in.Status) > 0 && !slices.Contains(in.Status, m.Status) {
			continue
		}
		if q != "" && !strings.Contains(strings.ToLower(m.Name), q) && !strings.Contains(strings.ToLower(m.SourcePeer), q) &&
			!strings.Contains(strings.ToLower(m.DestinationPeer), q) {
			continue
		}
		sum := mirrorSummary{Name: m.Name, SourcePeer: m.SourcePeer, DestinationPeer: m.DestinationPeer,
			Status: m.Status, LastLSN: m.LastLSN, ErrorMessage: m.ErrorMessage, ErrorCount: m.ErrorCount, SchemaChanges: m.SchemaChanges,
			SlotHealth: slotHealthResponse(m), RowsSynced: rows[m.ID], CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt}
		sum.LostChanges = lostChangesResponse(m)
		sum.WorkerInfo = withWorker(m, workers, unsure, &sum.SlotHealth)
		sum.PeerWarnings = peerWarningsOf(m, problems)
		list = append(list, sum)
	}
	sortMirrors(list, in.Sort)
	out := &mirrorListOutput{TotalCount: len(list), StatusTotals: statusTotals(totals)}
	page := list[min(in.Offset, len(list)):]
	if in.Limit > 0 && len(page) > in.Limit {
		page = page[:in.Limit]
	}
	out.Body = page
	return out, nil
}

// statusTotals writes the X-Status-Totals header: every status of the
// vocabulary, in its order, with its count.
func statusTotals(totals map[db.MirrorStatus]int) string {
	parts := make([]string, len(db.MirrorStatuses))
	for i, s := range db.MirrorStatuses {
		parts[i] = string(s) + "=" + strconv.Itoa(totals[s])
	}
	return strings.Join(parts, ", ")
}

// sortMirrors orders list, which comes in the catalog's order of names, by
// key (name, status, lag or created, with a leading - for descending), then
// by name. Mirrors without a lag come last whichever the direction.
func sortMirrors(list []mirrorSummary, key string) {
	pos := make(map[string]int, len(list))
	for i, m := range list {
		pos[m.Name] = i
	}
	byName := func(a, b mirrorSummary) int { return cmp.Compare(pos[a.Name], pos[b.Name]) }
	desc := strings.HasPrefix(key, "-")
	key = strings.TrimPrefix(key, "-")
	dir := func(c int) int {
		if desc {
			return -c
		}
		return c
	}
	slices.SortStableFunc(list, func(a, b mirrorSummary) int {
		var c int
		switch key {
		case "status":
			c = dir(cmp.Compare(slices.Index(db.MirrorStatuses, a.Status), slices.Index(db.MirrorStatuses, b.Status)))
		case "lag":
			switch {
			case a.LagSeconds == nil && b.LagSeconds == nil:
			case a.LagSeconds == nil:
				c = 1
			case b.LagSeconds == nil:
				c = -1
			default:
				c = dir(cmp.Compare(*a.LagSeconds, *b.LagSeconds))
			}
		case "created":
			c = dir(a.CreatedAt.Compare(b.CreatedAt))
		case "name":
			c = dir(byName(a, b))
		}
		if c != 0 {
			return c
		}
		return byName(a, b)
	})
}
