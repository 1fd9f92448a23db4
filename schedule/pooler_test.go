package schedule

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/schema"
)

// The transaction a claim runs in (runInTx) carries the handle's limits
// through a transaction pooler too, where the connection string's session
// settings do not reach the server: a worker that stalls after locking a
// job's row, before its COMMIT, has the transaction ended by the server
// within idle_in_transaction_session_timeout, which frees the row; the
// stalled transaction cannot commit afterwards. Claims through the pooler
// work as they do directly.
func TestClaimTransactionThroughAPoolerIsEndedWhenItStalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	direct := pgtest.Open(t, dsn, dbconn.Options{})
	const idle = time.Second
	pooled := pgtest.Open(t, pgtest.Bouncer(t, dsn), dbconn.Options{
		StatementTimeout: time.Minute, LockTimeout: time.Minute, IdleInTransactionTimeout: idle,
	})
	if err := NewStore(pgtest.Handle(direct), "").Add(ctx, Definition{Name: "j", Every: time.Hour}); err != nil {
		t.Fatal(err)
	}

	locked, resume, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- runInTx(ctx, pooled, func(tx bun.Tx) error {
			if _, err := tx.ExecContext(ctx, `UPDATE baton.jobs SET updated_at = now() WHERE name = 'j'`); err != nil {
				return err
			}
			close(locked)
			<-resume // the worker stalls here, its row locked
			_, err := tx.ExecContext(ctx, `SELECT 1`)
			return err
		})
	}()
	stalled := true
	defer func() {
		if stalled {
			close(resume)
			<-done
		}
	}()
	testutil.Receive(t, locked, 20*time.Second, "the claim's transaction holding the job's row")

	testutil.Eventually(t, idle+10*time.Second, "the job's row released by the server", func() error {
		tx, err := direct.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, `SELECT 1 FROM baton.jobs WHERE name = 'j' FOR UPDATE NOWAIT`)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			return fmt.Errorf("still locked: %w", err)
		}
		return err
	})
	stalled = false
	close(resume)
	if err := testutil.Receive(t, done, 20*time.Second, "the stalled transaction's end"); err == nil {
		t.Fatal("the stalled transaction committed after the server ended it")
	}
	// A claim through the pooler.
	if _, err := NewStore(pgtest.Handle(direct), "").Trigger(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	s := &runStore{db: pooled, schema: schema.Default, owner: "w#1", ttl: time.Minute}
	cands, _, err := s.candidates(ctx, nil)
	if err != nil || len(cands) != 1 {
		t.Fatalf("candidates %v, %v; want job j", cands, err)
	}
	cl, err := s.claim(ctx, cands[0])
	if err != nil || cl == nil {
		t.Fatalf("claim through the pooler: %v, %v", cl, err)
	}
}
