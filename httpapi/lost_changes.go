package httpapi

import (
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/jobs"
)

// LostChanges is the API form of a mirror's tables that may miss changes
// (docs/status.md, "Lost changes"). Exported because the mirror status and
// summary embed it by pointer in their OpenAPI schema.
type LostChanges struct {
	SinceLSN   *string       `json:"since_lsn" doc:"Source position after which changes may be missing on the destination (the mirror's applied position when the loss was found; the earliest of the tables); null when unknown."`
	UntilLSN   *string       `json:"until_lsn" doc:"Source position from which the slot delivers changes again (the new slot's start; the latest of the tables); null while the slot is still missing or invalidated."`
	DetectedAt time.Time     `json:"detected_at" doc:"When pgmirror first found the loss."`
	Reason     db.LostReason `json:"reason" doc:"slot_missing: the slot was gone; slot_recreated: a run found it gone and created it again; slot_invalidated: the source removed WAL the slot needed (wal_status lost); slot_behind: the slot's confirmed position was past what pgmirror applied or confirmed (someone recreated or advanced it)."`
	Tables     []string      `json:"tables" doc:"Source tables (schema.table) whose destination may miss changes."`
	Action     string        `json:"action" doc:"What to do: resync these tables, or run a verification (with repair) that finds them equal."`
}

// tableLostChanges is the per-table form of lost changes.
type tableLostChanges struct {
	SinceLSN   *string       `json:"since_lsn"`
	UntilLSN   *string       `json:"until_lsn"`
	DetectedAt time.Time     `json:"detected_at"`
	Reason     db.LostReason `json:"reason"`
}

// lostChangesResponse sums up the mirror's marked tables; nil when none is.
func lostChangesResponse(m db.Mirror) *LostChanges {
	if len(m.LostChanges) == 0 {
		return nil
	}
	out := &LostChanges{Tables: make([]string, 0, len(m.LostChanges))}
	var since, until change.LSN
	var latest time.Time
	for i, t := range m.LostChanges {
		out.Tables = append(out.Tables, t.Table)
		if i == 0 || t.DetectedAt.Before(out.DetectedAt) {
			out.DetectedAt = t.DetectedAt
		}
		if i == 0 || !t.DetectedAt.Before(latest) {
			latest, out.Reason = t.DetectedAt, t.Reason
		}
		if t.SinceLSN != nil {
			if lsn, err := change.ParseLSN(*t.SinceLSN); err == nil && (out.SinceLSN == nil || lsn < since) {
				since, out.SinceLSN = lsn, t.SinceLSN
			}
		}
		if t.UntilLSN != nil {
			if lsn, err := change.ParseLSN(*t.UntilLSN); err == nil && (out.UntilLSN == nil || lsn > until) {
				until, out.UntilLSN = lsn, t.UntilLSN
			}
		}
	}
	out.Action = jobs.LostChangesAction(m.Name, out.Tables)
	return out
}

func tableLostChangesResponse(t db.MirrorTable) *tableLostChanges {
	if t.LostChanges == nil {
		return nil
	}
	l := t.LostChanges
	return &tableLostChanges{SinceLSN: l.SinceLSN, UntilLSN: l.UntilLSN, DetectedAt: l.DetectedAt, Reason: l.Reason}
}
