package taskstore_test

import (
	"context"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// A worker's first heartbeat, which registers it, notifies the others
// ("joined") at its commit; its later heartbeats and a late one after it
// stopped do not. The upsert tells the insert from the update by the row's
// xmax before PostgreSQL 18 and by RETURNING OLD from 18 on: each form the
// server can run is checked, the older one on 18 too.
func TestOnlyTheFirstHeartbeatNotifiesJoined(t *testing.T) {
	t.Parallel()
	forms := []struct {
		name string
		num  int // server_version_num the store is told; 0: the server's
	}{{"server's own", 0}, {"before 18 (xmax)", 170000}}
	if pgtest.VersionNum(t) >= 180000 {
		forms = append(forms, struct {
			name string
			num  int
		}{"18 (RETURNING OLD)", pgtest.VersionNum(t)})
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewURL(t)
			db := pgtest.Open(t, url, dbconn.Options{})
			ctx := context.Background()
			listener := pgtest.Listen(t, url, notify.Channel)
			// Notifications arrive in commit order: a marker sent after a
			// heartbeat committed comes first only if that heartbeat
			// notified nothing.
			marker := func(name string) string {
				t.Helper()
				if _, err := db.ExecContext(ctx, `SELECT pg_notify(?, ?)`, notify.Channel, name); err != nil {
					t.Fatal(err)
				}
				return name
			}
			s := taskstore.NewStore(db, "")
			if f.num != 0 {
				s = taskstore.WithServerVersion(s, f.num)
			}
			joined := notify.Payload(notify.Joined, partition.DefaultKind)
			w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
			beat := func() {
				t.Helper()
				if _, err := s.Heartbeat(ctx, w, time.Minute, nil); err != nil {
					t.Fatal(err)
				}
			}
			beat()
			if got := listener.Next(); got != joined {
				t.Fatalf("first heartbeat notified %q, want %q", got, joined)
			}
			for i := range 2 {
				beat()
				want := marker(fmt.Sprint("after beat ", i+2))
				if got := listener.Next(); got != want {
					t.Fatalf("heartbeat %d notified %q, want nothing", i+2, got)
				}
			}
			if err := s.StopWorker(ctx, w.InstanceID); err != nil {
				t.Fatal(err)
			}
			if got, want := listener.Next(), notify.Payload(notify.Left, partition.DefaultKind); got != want {
				t.Fatalf("stopping the worker notified %q, want %q", got, want)
			}
			beat()
			want := marker("after the late beat")
			if got := listener.Next(); got != want {
				t.Fatalf("a late heartbeat of the stopped worker notified %q, want nothing", got)
			}
			var stopped bool
			if err := db.QueryRowContext(ctx, `SELECT stopped_at IS NOT NULL FROM baton.workers WHERE instance_id = ?`, w.InstanceID).Scan(&stopped); err != nil || !stopped {
				t.Fatalf("a late heartbeat brought the stopped worker back: stopped %v, %v", stopped, err)
			}
		})
	}
}

// A store that took the server for 18 or later while it is older (a
// database handle moved back to an older major) fails one heartbeat, on
// the statement the server cannot parse, reads the version again and
// sends the older form from the next one on.
func TestHeartbeatFormFollowsAServerThatIsOlder(t *testing.T) {
	t.Parallel()
	if pgtest.VersionNum(t) >= 180000 {
		t.Skip("needs a server before PostgreSQL 18 (RETURNING OLD runs on this one)")
	}
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.WithServerVersion(taskstore.NewStore(db, ""), 180000)
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	if _, err := s.Heartbeat(ctx, w, time.Minute, nil); err == nil {
		t.Fatal("the PostgreSQL 18 form of the heartbeat ran on an older server")
	}
	if _, err := s.Heartbeat(ctx, w, time.Minute, nil); err != nil {
		t.Fatalf("the heartbeat after the version was read again: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM baton.workers WHERE instance_id = ?`, w.InstanceID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d worker rows, %v; want the worker registered", n, err)
	}
}
