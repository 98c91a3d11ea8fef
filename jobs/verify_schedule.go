package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// VerifyScheduleArgs is the periodic job (leader only) that starts the
// verifications of mirrors with a verification interval that are due.
type VerifyScheduleArgs struct{}

// Kind is the River job kind.
func (VerifyScheduleArgs) Kind() string { return "mirror_verify_schedule" }

// VerifyScheduleWorker starts due verifications.
type VerifyScheduleWorker struct {
	river.WorkerDefaults[VerifyScheduleArgs]
	cfg Config
}

// Work starts a verification of every running mirror whose interval has
// passed since its last verification started and that has none running;
// each is created and enqueued in one catalog transaction.
func (w *VerifyScheduleWorker) Work(ctx context.Context, job *river.Job[VerifyScheduleArgs]) error {
	store := w.cfg.Store
	ids, err := store.VerificationsDue(ctx)
	if err != nil {
		return err
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("river client: %w", err)
	}
	for _, id := range ids {
		err := pgx.BeginFunc(ctx, store.Pool(), func(tx pgx.Tx) error {
			s := store.With(tx)
			if _, err := tx.Exec(ctx, `SELECT 1 FROM mirrors WHERE id = $1 FOR UPDATE`, id); err != nil {
				return err
			}
			if n, err := s.VerificationsRunning(ctx, id); err != nil || n > 0 {
				return err
			}
			v, err := s.VerificationCreate(ctx, id, "schedule", nil, 0)
			if err != nil {
				return err
			}
			_, err = client.InsertTx(ctx, tx, VerifyArgs{VerificationID: v.ID}, nil)
			return err
		})
		if err != nil {
			w.cfg.Logger.Warn("start a scheduled verification", "mirror_id", id, "error", err)
		}
	}
	return nil
}

// verifySchedulePeriod is how often the leader looks for due verifications.
func (c Config) verifySchedulePeriod() time.Duration {
	if c.VerifyScheduleInterval > 0 {
		return c.VerifyScheduleInterval
	}
	return 30 * time.Second
}
