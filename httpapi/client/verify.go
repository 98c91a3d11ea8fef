package client

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// Verification operations.
var (
	OpVerifyMirror       = Operation{"verify-mirror", "POST", "/v1/mirrors/{name}/verify", nil}
	OpListVerifications  = Operation{"list-verifications", "GET", "/v1/mirrors/{name}/verifications", []string{"limit"}}
	OpGetVerification    = Operation{"get-verification", "GET", "/v1/mirrors/{name}/verifications/{id}", nil}
	OpCancelVerification = Operation{"cancel-verification", "DELETE", "/v1/mirrors/{name}/verifications/{id}", nil}
	OpRepairVerification = Operation{"repair-verification", "POST", "/v1/mirrors/{name}/verifications/{id}/repair", nil}
	OpSetVerifyInterval  = Operation{"set-verify-interval", "PUT", "/v1/mirrors/{name}/verify-interval", nil}
)

func init() {
	Operations = append(Operations, OpVerifyMirror, OpListVerifications, OpGetVerification, OpCancelVerification,
		OpRepairVerification, OpSetVerifyInterval)
}

// VerifyRequest is the optional body of VerifyMirror.
type VerifyRequest struct {
	Tables []string `json:"tables,omitempty"`
}

// VerificationTable is one table's outcome of a verification.
type VerificationTable struct {
	Table           string   `json:"table"`
	Destination     string   `json:"destination"`
	Method          string   `json:"method"`
	RowsSource      int64    `json:"rows_source"`
	RowsDestination int64    `json:"rows_destination"`
	Chunks          int      `json:"chunks"`
	ChunksDiffering int      `json:"chunks_differing"`
	RowsDiffering   int64    `json:"rows_differing"`
	Missing         []string `json:"missing"`
	Extra           []string `json:"extra"`
	Different       []string `json:"different"`
	Skipped         string   `json:"skipped,omitempty"`
	DurationMS      int64    `json:"duration_ms"`
}

// Verification is a comparison of a mirror's destination with its source
// at one source position.
type Verification struct {
	ID            int64               `json:"id"`
	RepairOf      *int64              `json:"repair_of"`
	Mirror        string              `json:"mirror"`
	State         string              `json:"state"`
	LSN           *string             `json:"lsn"`
	RequestedBy   string              `json:"requested_by,omitempty"`
	StartedAt     time.Time           `json:"started_at"`
	FinishedAt    *time.Time          `json:"finished_at"`
	Error         *string             `json:"error"`
	RowsDiffering *int64              `json:"rows_differing"`
	Tables        []VerificationTable `json:"tables"`
	// ReverseMirrorProblems: what would keep a cut-over from creating a
	// reverse mirror; nil when not checked.
	ReverseMirrorProblems *[]string `json:"reverse_mirror_problems"`
}

// MirrorVerification is the verification part of a mirror's status.
type MirrorVerification struct {
	VerifyIntervalSeconds int                 `json:"verify_interval_seconds"`
	Last                  *VerificationLatest `json:"last"`
}

// VerificationLatest summarises a mirror's latest completed verification.
type VerificationLatest struct {
	ID            int64      `json:"id"`
	LSN           string     `json:"lsn"`
	FinishedAt    *time.Time `json:"finished_at"`
	RowsDiffering int64      `json:"rows_differing"`
}

// VerifyInterval is the body and answer of SetVerifyInterval.
type VerifyInterval struct {
	VerifyIntervalSeconds int `json:"verify_interval_seconds"`
}

// VerifyIntervalResult is the answer of SetVerifyInterval.
type VerifyIntervalResult struct {
	Message               string `json:"message"`
	VerifyIntervalSeconds int    `json:"verify_interval_seconds"`
}

// VerifyMirror starts a verification of a running mirror (admin).
func (c *Client) VerifyMirror(ctx context.Context, name string, req VerifyRequest) (*Verification, error) {
	return call[Verification](ctx, c, OpVerifyMirror, p(name), nil, req)
}

// ListVerifications returns a mirror's verifications, newest first (limit 0: the default).
func (c *Client) ListVerifications(ctx context.Context, name string, limit int) ([]Verification, error) {
	v := url.Values{}
	setInt(v, "limit", limit)
	var out []Verification
	if _, err := c.Do(ctx, OpListVerifications, p(name), v, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// GetVerification returns one verification of a mirror.
func (c *Client) GetVerification(ctx context.Context, name string, id int64) (*Verification, error) {
	return call[Verification](ctx, c, OpGetVerification, p(name, strconv.FormatInt(id, 10)), nil, nil)
}

// CancelVerification cancels a running verification (admin).
func (c *Client) CancelVerification(ctx context.Context, name string, id int64) (*Verification, error) {
	return call[Verification](ctx, c, OpCancelVerification, p(name, strconv.FormatInt(id, 10)), nil, nil)
}

// RepairVerification copies again what verification id found different and
// verifies again (admin); it returns the new verification.
func (c *Client) RepairVerification(ctx context.Context, name string, id int64) (*Verification, error) {
	return call[Verification](ctx, c, OpRepairVerification, p(name, strconv.FormatInt(id, 10)), nil, nil)
}

// SetVerifyInterval sets how often a mirror is verified on its own (0: off; admin).
func (c *Client) SetVerifyInterval(ctx context.Context, name string, seconds int) (*VerifyIntervalResult, error) {
	return call[VerifyIntervalResult](ctx, c, OpSetVerifyInterval, p(name), nil, VerifyInterval{VerifyIntervalSeconds: seconds})
}
