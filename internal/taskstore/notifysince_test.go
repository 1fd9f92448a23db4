package taskstore_test

import (
	"context"
	"github.com/batonhq/baton/internal/notify"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// Every notification that makes rows claimable says when they became so,
// no later than their claimable_at, even when its transaction commits long
// after: a release and a heartbeat's hand-back, each here in a
// transaction of its own that commits after a further statement, and a
// retry, so a
// worker that hears it lowers its floor below the rows however late the
// commit came.
func TestClaimableNotificationsSayWhen(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	ctx := context.Background()
	listener := pgtest.Listen(t, url, notify.Channel)
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available, position)
		VALUES ('released', 5, 0), ('handed-back', 5, 0), ('retried', 5, 0)`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	released := claimOne(t, s, "released")
	claimOne(t, s, "handed-back")
	// Its lease ended without its owner listing it: the owner's next
	// heartbeat hands it back.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET lease_expires_at = now() - interval '1 second' WHERE partition_key = 'handed-back'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET failed_at = now(), attempts = 5 WHERE partition_key = 'retried'`); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		key, reason string
		do          func(tx bun.Tx) error
	}{
		{"released", notify.Released, func(tx bun.Tx) error {
			_, err := s.WithDB(tx).Release(ctx, "w#1", []partition.Lease{released})
			return err
		}},
		{"handed-back", notify.Released, func(tx bun.Tx) error {
			_, err := s.WithDB(tx).Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, nil)
			return err
		}},
		{"retried", notify.Retry, func(bun.Tx) error {
			// A retry commits in a transaction of its own.
			_, err := s.Admin().Retry(ctx, "retried")
			return err
		}},
	} {
		// The database's clock before the change: the time a notification
		// gives lies between it and the row's claimable_at.
		var before time.Time
		if err := db.QueryRowContext(ctx, `SELECT clock_timestamp()`).Scan(&before); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.do(tx); err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		var at time.Time
		if err := tx.QueryRowContext(ctx, `SELECT claimable_at FROM baton.tasks WHERE partition_key = ?`, c.key).Scan(&at); err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		payload := listener.Next()
		if reason, kind := notify.Parse(payload); reason != c.reason || kind != partition.DefaultKind {
			t.Fatalf("%s: notification %q, want %s of the default kind", c.key, payload, c.reason)
		}
		since, ok := notify.Since(payload)
		if !ok {
			t.Fatalf("%s: notification %q says not when the row became claimable", c.key, payload)
		}
		if since.After(at) || since.Before(before) {
			t.Fatalf("%s: notification says claimable since %v, the row since %v, the change began after %v: want between the two",
				c.key, since, at, before)
		}
	}
}
