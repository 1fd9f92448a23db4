package taskstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/batonhq/baton/internal/leaseinfo"
	"github.com/batonhq/baton/internal/notify"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.uber.org/goleak"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// The tests leave no goroutine behind (the server is torn down first).
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.WithServer(m)) }

// With 100,000 task rows, a claim poll reads the head of its kind's range
// of the claimable index, not the table, however many claimable rows
// other kinds have. The plans are those of the store's own statements,
// captured as they are sent.
func TestCandidateQueriesAreIndexDriven(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	// 100,000 partitions: most caught up, some pending, some owned (half
	// of those by a dead worker, whose leases have ended).
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.workers (instance_id, name, expires_at, kind)
		VALUES ('w#1', 'w', now() + interval '1 hour', 'default'), ('w#2', 'w', now() - interval '1 hour', 'default'),
		       ('o#1', 'o', now() - interval '2 hours', 'other')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position, owner, lease_expires_at)
		SELECT 'p' || i, 10, CASE WHEN i % 50 = 0 THEN 0 ELSE 10 END,
		       CASE WHEN i % 14 = 0 THEN 'w#2' WHEN i % 7 = 0 THEN 'w#1' END,
		       CASE WHEN i % 14 = 0 THEN now() - interval '1 hour'
		            WHEN i % 7 = 0 THEN now() + interval '1 hour' ELSE '-infinity' END
		FROM generate_series(1, 100000) i`); err != nil {
		t.Fatal(err)
	}
	// Another kind's 50,000 partitions, all claimable, with the same keys
	// and earlier in lease order than any of the default kind's.
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (kind, partition_key, available, position, owner, lease_expires_at)
		SELECT 'other', 'p' || i, 10, 0, CASE WHEN i % 2 = 0 THEN 'o#1' END,
		       CASE WHEN i % 2 = 0 THEN now() - interval '2 hours' ELSE '-infinity' END
		FROM generate_series(1, 50000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE baton.tasks, baton.workers`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	for _, tc := range []struct {
		name string
		read func(context.Context, int) ([]taskstore.Candidate, error)
		args []any // after the limit and the kind
	}{
		{"Candidates", s.Candidates, []any{"-infinity"}},
		{"Candidates", s.Candidates, []any{"2026-11-26T00:00:00Z"}}, // from a floor
		{"StaleCandidates", s.StaleCandidates, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cands, err := tc.read(ctx, 40)
			if err != nil || len(cands) != 40 {
				t.Fatalf("%s = %d rows, %v", tc.name, len(cands), err)
			}
			for _, c := range cands {
				// The default kind's claimable rows are those numbered by
				// multiples of 50 (pending) or of 14 (a dead owner's).
				if n, _ := strconv.Atoi(strings.TrimPrefix(c.Key, "p")); n%50 != 0 && n%14 != 0 {
					t.Fatalf("%s read %v, a partition of another kind", tc.name, c)
				}
			}
			for _, plan := range explainPrepared(t, db, taskstore.StatementSQL(tc.name), append([]any{40, partition.DefaultKind}, tc.args...)...) {
				// Unowned rows from the claimable index, stale ones through
				// the dead workers' rows (workers is read whole: one row
				// per instance).
				if tc.name == "Candidates" && !strings.Contains(plan, `"Index Name": "tasks_claimable"`) ||
					!strings.Contains(plan, `"Index Name": "tasks_owner"`) {
					t.Fatalf("%s does not use the claimable and owner indexes:\n%s", tc.name, plan)
				}
				walkPlan(t, plan, func(n map[string]any) {
					if n["Relation Name"] == "tasks" && n["Node Type"] == "Seq Scan" {
						t.Fatalf("%s reads tasks sequentially:\n%s", tc.name, plan)
					}
				})
				var p []struct {
					Plan struct {
						Plans []struct {
							ActualRows float64 `json:"Actual Rows"`
						} `json:"Plans"`
					} `json:"Plan"`
				}
				if err := json.Unmarshal([]byte(plan), &p); err != nil {
					t.Fatal(err)
				}
				if rows := p[0].Plan.Plans[0].ActualRows; rows > 40 {
					t.Fatalf("index scan returned %v rows for a LIMIT 40 poll:\n%s", rows, plan)
				}
			}
		})
	}
}

// explainPrepared prepares q, a statement with parameters, as a direct
// connection does, and returns its plans (EXPLAIN ANALYZE, JSON) executed
// with args both as a custom plan and as the generic plan the server may
// switch to after a few executions: both must be index-driven.
// claimOne claims key, unowned at version 0, for worker w#1.
func claimOne(t *testing.T, s *taskstore.Store, key string) partition.Lease {
	t.Helper()
	won, err := s.Claim(context.Background(), "w#1", time.Minute, []taskstore.Candidate{{Key: key, Version: 0}})
	if err != nil || len(won) != 1 {
		t.Fatalf("claiming %s: %v %v", key, won, err)
	}
	return won[0].Lease
}

func explainPrepared(t *testing.T, db *bun.DB, q string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PREPARE explained AS "+q); err != nil {
		t.Fatal(err)
	}
	params := strings.Repeat(", ?", len(args))[2:]
	var plans []string
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		var plan string
		if err := conn.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained("+params+")", args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		plans = append(plans, plan)
	}
	if _, err := conn.ExecContext(ctx, "DEALLOCATE explained; RESET plan_cache_mode"); err != nil {
		t.Fatal(err)
	}
	return plans
}

// walkPlan calls visit on every node of a JSON plan from explainPrepared.
func walkPlan(t *testing.T, plan string, visit func(node map[string]any)) {
	t.Helper()
	var nodes []any
	if err := json.Unmarshal([]byte(plan), &nodes); err != nil {
		t.Fatal(err)
	}
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		visit(n)
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(nodes[0].(map[string]any)["Plan"].(map[string]any))
}

// One heartbeat statement renews any number of leases and reports which.
func TestHeartbeatRenewsOnlyCurrentLeases(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available)
		SELECT 'k' || i, 5 FROM generate_series(1, 300) i`); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	won, err := s.Claim(ctx, "w#1", time.Minute, cands)
	if err != nil || len(won) != 300 {
		t.Fatalf("claimed %d, %v", len(won), err)
	}
	leases := make([]partition.Lease, len(won))
	for i, c := range won {
		leases[i] = c.Lease
	}
	// Another claim supersedes one lease.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET version = version + 1, owner = 'w#2' WHERE partition_key = 'k7'`); err != nil {
		t.Fatal(err)
	}
	ren, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Minute, leases)
	if err != nil {
		t.Fatal(err)
	}
	if len(ren) != 299 {
		t.Fatalf("renewed %d leases, want 299", len(ren))
	}
	for _, r := range ren {
		if r.Key == "k7" {
			t.Fatal("renewed a lease that belongs to another claim")
		}
		if r.Available != 5 || r.Position != 0 {
			t.Fatalf("renewal %+v lacks work counters", r)
		}
	}
	// Released leases are claimable at once; the release bumped versions.
	rel, err := s.Release(ctx, "w#1", leases[:10])
	if err != nil || len(rel) != 10 {
		t.Fatalf("released %d, %v", len(rel), err)
	}
	again, err := s.Candidates(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 10 {
		t.Fatalf("%d candidates after releasing 10", len(again))
	}
	for _, c := range again {
		if c.Owned {
			t.Fatalf("released partition %s still looks owned", c.Key)
		}
	}
}

// A commit whose outcome the worker could not learn may apply after the
// worker retried the batch under the same claim. The retry's checkpoint
// update must then fail, not commit the same items a second time.
func TestAdvanceIsACompareAndSetOnPosition(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available) VALUES ('k', 100)`); err != nil {
		t.Fatal(err)
	}
	cands, _ := s.Candidates(ctx, 1)
	won, err := s.Claim(ctx, "w#1", time.Minute, cands)
	if err != nil || len(won) != 1 {
		t.Fatalf("claim: %v %v", won, err)
	}
	l := won[0].Lease
	// The first attempt: fenced at 0, checkpoint written, commit stalls.
	first, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback()
	cp1, err := s.Fence(ctx, first, "w#1", l)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, first, l, cp1.Position, 10, nil); err != nil {
		t.Fatal(err)
	}
	// The retry: its fence is compatible and still reads position 0.
	retry, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer retry.Rollback()
	cp2, err := s.Fence(ctx, retry, "w#1", l)
	if err != nil {
		t.Fatal(err)
	}
	if cp2.Position != 0 {
		t.Fatalf("retry fenced at %d, want 0 (the first commit is not visible yet)", cp2.Position)
	}
	// The retry's checkpoint update queues behind the first transaction's
	// row lock; then the stalled commit lands.
	advanced := make(chan error, 1)
	go func() { advanced <- s.Advance(ctx, retry, l, cp2.Position, 10, nil) }()
	pgtest.WaitForLockWait(t, db, "WITH u AS")
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	err = <-advanced
	if !errors.Is(err, partition.ErrCheckpointMoved) {
		t.Fatalf("retry's Advance = %v, want ErrCheckpointMoved", err)
	}
	if err := retry.Rollback(); err != nil { // as the distributor does
		t.Fatal(err)
	}
	var pos int64
	if err := db.QueryRow(`SELECT position FROM baton.tasks`).Scan(&pos); err != nil || pos != 10 {
		t.Fatalf("position %d, %v; want 10 (committed once)", pos, err)
	}
	// A claim that is no longer current is fenced, not "moved".
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET version = version + 1`); err != nil {
		t.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	if err := s.Advance(ctx, tx, l, 10, 20, nil); !errors.Is(err, partition.ErrFenced) {
		t.Fatalf("Advance under a superseded claim = %v, want ErrFenced", err)
	}
}

// A release notifies waiting workers, at its commit, only when a released
// partition still has work pending.
func TestReleaseNotifiesOnlyWithPendingWork(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	ctx := context.Background()
	listener := pgtest.Listen(t, url, notify.Channel)
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (partition_key, available, position)
		VALUES ('done', 5, 2), ('pending', 5, 2)`); err != nil {
		t.Fatal(err)
	}
	s := taskstore.NewStore(db, "")
	done, pending := claimOne(t, s, "done"), claimOne(t, s, "pending")
	// The owner's last batch catches "done" up.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET position = available WHERE partition_key = 'done'`); err != nil {
		t.Fatal(err)
	}

	rel, err := s.Release(ctx, "w#1", []partition.Lease{done})
	if err != nil || len(rel) != 1 {
		t.Fatalf("releasing done: %v %v", rel, err)
	}
	// Notifications arrive in commit order: had the release notified, its
	// payload would come before this marker.
	if err := s.Notify(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	if got := listener.Next(); got != notify.Payload("marker", partition.DefaultKind) {
		t.Fatalf("first notification %q after releasing a caught-up partition; want none before the marker", got)
	}
	rel, err = s.Release(ctx, "w#1", []partition.Lease{pending})
	if err != nil || len(rel) != 1 || rel[0] != "pending" {
		t.Fatalf("releasing pending: %v %v", rel, err)
	}
	if got := listener.Next(); !strings.HasPrefix(got, notify.Payload(notify.Released, partition.DefaultKind)+" ") {
		t.Fatalf("notification %q after releasing a partition with pending work; want released, with a time", got)
	}
	// Releasing again is fenced by version: nothing released, no notification.
	if rel, err := s.Release(ctx, "w#1", []partition.Lease{pending}); err != nil || len(rel) != 0 {
		t.Fatalf("second release: %v %v; want nothing released", rel, err)
	}
	if err := s.Notify(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	if got := listener.Next(); got != notify.Payload("marker", partition.DefaultKind) {
		t.Fatalf("notification %q after a fenced release; want none before the marker", got)
	}
}

// The fair-share read's cost is bounded by what can change a share, not by
// the table: with 100,000 task rows it reads no table sequentially, caps
// Busy at live workers × maxPartitions and Unclaimed at maxPartitions + 1,
// and agrees exactly with ClusterLoad below the caps, zero included.
func TestFairShareLoadIsBoundedAndExactBelowItsCaps(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	for _, w := range []string{"w#1", "w#2"} {
		if _, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: w, Name: "w"}, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing at all: exact zeros.
	l, err := s.FairShareLoad(ctx, "w#2", 4, time.Hour)
	if err != nil || l != (taskstore.Load{LiveWorkers: 2}) {
		t.Fatalf("empty: FairShareLoad = %+v, %v", l, err)
	}
	// A few: exactly ClusterLoad's figures, Quarantined aside. w#1 holds
	// 3 leases (2 caught up), one partition is quarantined.
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position, owner, lease_expires_at, failed_at)
		VALUES ('a', 5, 0, NULL, '-infinity', NULL), ('b', 5, 0, 'w#1', now() + interval '1 hour', NULL),
		       ('c', 5, 5, 'w#1', now() + interval '1 hour', NULL), ('d', 2, 2, 'w#1', now() + interval '1 hour', NULL),
		       ('e', 5, 0, NULL, 'infinity', now()), ('f', 5, 5, NULL, '-infinity', NULL)`); err != nil {
		t.Fatal(err)
	}
	// The held counts come from the workers' heartbeats: before w#1 renews
	// its leases the read does not know of them.
	if l, err = s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l.Busy != 1 || l.MinHeld != 0 {
		t.Fatalf("before w#1's heartbeat: FairShareLoad = %+v, %v; want Busy 1 (a), MinHeld 0", l, err)
	}
	leases := []partition.Lease{{Key: "b"}, {Key: "c"}, {Key: "d"}}
	if rs, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Hour, leases); err != nil || len(rs) != 3 {
		t.Fatalf("w#1's heartbeat: %v, %v", rs, err)
	}
	want, err := s.ClusterLoad(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want.Quarantined = 0
	if l, err = s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l != want {
		t.Fatalf("small: FairShareLoad = %+v, %v; want ClusterLoad's %+v", l, err, want)
	}
	if n, err := s.QuarantinedCount(ctx); err != nil || n != 1 {
		t.Fatalf("QuarantinedCount = %d, %v; want 1", n, err)
	}
	// 100,000 pending partitions: capped, and index-driven.
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position) SELECT 'p' || i, 10, 0 FROM generate_series(1, 100000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE baton.tasks`); err != nil {
		t.Fatal(err)
	}
	if l, err = s.FairShareLoad(ctx, "w#2", 4, time.Hour); err != nil {
		t.Fatal(err)
	}
	if l.Busy != 8 || l.LiveWorkers != 2 || l.Unclaimed != 5 || l.MinHeld != 0 {
		t.Fatalf("large: FairShareLoad = %+v; want Busy 8 (2 workers × 4), Unclaimed 5, MinHeld 0", l)
	}
	// The backlog of the rows counted, a lower bound: w#1's held 5 and
	// some capped rows' 10 each, not the table's million.
	if l.Backlog <= 5 || l.Backlog > 5+10*16 {
		t.Fatalf("large: FairShareLoad = %+v; want a Backlog of the rows counted (5 + 10 per capped row)", l)
	}
	// w#2 holding as many as w#1: MinHeld follows, and Busy stays capped.
	if _, err := db.ExecContext(ctx, `
		UPDATE baton.tasks SET owner = 'w#2', lease_expires_at = now() + interval '1 hour' WHERE partition_key IN ('p1', 'p2', 'p3')`); err != nil {
		t.Fatal(err)
	}
	// The count is of the leases still held: a lease that is not (x) is
	// not counted.
	if rs, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#2", Name: "w"}, time.Hour,
		[]partition.Lease{{Key: "p1"}, {Key: "p2"}, {Key: "p3"}, {Key: "x"}}); err != nil || len(rs) != 3 {
		t.Fatalf("w#2's heartbeat: %v, %v", rs, err)
	}
	if l, err = s.FairShareLoad(ctx, "w#2", 4, time.Hour); err != nil || l.Busy != 8 || l.MinHeld != 3 || l.SelfBacklog != 30 {
		t.Fatalf("both holding: FairShareLoad = %+v, %v; want Busy 8, MinHeld 3, SelfBacklog 30 (w#2's three)", l, err)
	}
	// What the others want, as their heartbeats said; a worker's own
	// wish is not counted for it.
	if _, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w", Wanted: 3}, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if l, err = s.FairShareLoad(ctx, "w#2", 4, time.Hour); err != nil || l.Wanted != 3 {
		t.Fatalf("w#1 wanting 3: FairShareLoad for w#2 = %+v, %v; want Wanted 3", l, err)
	}
	if l, err = s.FairShareLoad(ctx, "w#1", 4, time.Hour); err != nil || l.Wanted != 0 {
		t.Fatalf("w#1 wanting 3: FairShareLoad for w#1 = %+v, %v; want Wanted 0 (its own)", l, err)
	}
	for _, plan := range explainPrepared(t, db, taskstore.StatementSQL("FairShareLoad"), 4, int64(time.Hour/time.Microsecond), "w#2",
		partition.DefaultKind, "-infinity") {
		// Every plan node over tasks: no sequential scan, and together they
		// read a few caps' worth of rows, not the table.
		var rows float64
		walkPlan(t, plan, func(n map[string]any) {
			if n["Relation Name"] == "tasks" {
				if n["Node Type"] == "Seq Scan" {
					t.Fatalf("FairShareLoad reads tasks sequentially:\n%s", plan)
				}
				rows += n["Actual Rows"].(float64) * n["Actual Loops"].(float64)
			}
		})
		if rows > 100 {
			t.Fatalf("FairShareLoad read %v task rows:\n%s", rows, plan)
		}
	}
}

// Pending work that is waiting out a failure's back-off is not claimable,
// so the fair-share read does not count it, but Busy stays above zero while
// it exists: an until-done run must not stop with work left.
func TestFairShareLoadCountsBackoffAsBusyOnlyWhenNothingElseIs(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	if _, err := s.Heartbeat(ctx, taskstore.Worker{InstanceID: "w#1", Name: "w"}, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position, lease_expires_at, attempts)
		VALUES ('a', 5, 0, now() + interval '1 hour', 1), ('b', 5, 0, now() + interval '1 hour', 1)`); err != nil {
		t.Fatal(err)
	}
	if l, err := s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l != (taskstore.Load{Busy: 1, LiveWorkers: 1}) {
		t.Fatalf("only back-off: FairShareLoad = %+v, %v; want Busy 1, LiveWorkers 1", l, err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET position = 5`); err != nil {
		t.Fatal(err)
	}
	if l, err := s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l != (taskstore.Load{LiveWorkers: 1}) {
		t.Fatalf("all done: FairShareLoad = %+v, %v; want zeros", l, err)
	}
}

// A heartbeat finds its leases through the primary key, custom plan or
// generic, however many task rows there are.
func TestHeartbeatIsIndexDriven(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position, owner, lease_expires_at)
		SELECT 'p' || i, 10, 0, CASE WHEN i <= 8 THEN 'w#1' END,
		       CASE WHEN i <= 8 THEN now() + interval '1 hour' ELSE '-infinity' END
		FROM generate_series(1, 100000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE baton.tasks`); err != nil {
		t.Fatal(err)
	}
	keys := []string{"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"}
	versions := make([]int64, len(keys))
	forms := []string{"Heartbeat"}
	if pgtest.VersionNum(t) >= 180000 {
		forms = append(forms, "Heartbeat18") // RETURNING OLD
	}
	for _, form := range forms {
		for _, plan := range explainPrepared(t, db, taskstore.StatementSQL(form),
			pgdialect.Array(keys), pgdialect.Array(versions), "w#1", "w", "", 0, "lock", "listen", int64(time.Hour/time.Microsecond), int64(2*time.Hour/time.Microsecond), 0,
			partition.DefaultKind, notify.Channel, notify.Payload(notify.Released, partition.DefaultKind),
			notify.Payload(notify.Joined, partition.DefaultKind)) {
			walkPlan(t, plan, func(n map[string]any) {
				if n["Relation Name"] == "tasks" && n["Node Type"] == "Seq Scan" {
					t.Fatalf("the heartbeat (%s) reads tasks sequentially:\n%s", form, plan)
				}
			})
		}
	}
	var held int
	if err := db.QueryRowContext(ctx, `SELECT held FROM baton.workers WHERE instance_id = 'w#1'`).Scan(&held); err != nil || held != 8 {
		t.Fatalf("workers.held = %d, %v; want 8", held, err)
	}
}

// A claim raises its worker's held count at once, so a fair share computed
// between the claim and the claimer's next heartbeat counts it; a claim
// inside a caller's transaction leaves it to the next heartbeat rather than
// keep the worker's row locked until that transaction ends.
func TestClaimCountsHeldPartitionsOutsideTransactions(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	if _, err := s.Heartbeat(ctx, w, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position) SELECT 'p' || i, 10, 0 FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT held FROM baton.workers WHERE instance_id = 'w#1'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cands, err := s.Candidates(ctx, 5)
	if err != nil || len(cands) != 5 {
		t.Fatalf("candidates: %v, %v", cands, err)
	}
	won, err := s.Claim(ctx, w.InstanceID, time.Hour, cands[:2])
	if err != nil || len(won) != 2 {
		t.Fatalf("claim: %v, %v", won, err)
	}
	if n := held(); n != 2 {
		t.Fatalf("held after claiming 2 = %d", n)
	}
	if l, err := s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l.Busy != 5 || l.MinHeld != 2 || l.Unclaimed != 3 {
		t.Fatalf("FairShareLoad = %+v, %v; want Busy 5, MinHeld 2, Unclaimed 3", l, err)
	}
	// Lost claims count nothing.
	if won, err := s.Claim(ctx, w.InstanceID, time.Hour, cands[:2]); err != nil || len(won) != 0 {
		t.Fatalf("second claim of the same candidates: %v, %v", won, err)
	}
	if n := held(); n != 2 {
		t.Fatalf("held after a lost claim = %d", n)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if won, err := s.WithDB(tx).Claim(ctx, w.InstanceID, time.Hour, cands[2:3]); err != nil || len(won) != 1 {
		t.Fatalf("claim in a transaction: %v, %v", won, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 2 {
		t.Fatalf("held after a claim in a transaction = %d; want 2 until the next heartbeat", n)
	}
	leases := []partition.Lease{won[0].Lease, won[1].Lease, {Key: cands[2].Key, Version: cands[2].Version + 1}}
	if rs, err := s.Heartbeat(ctx, w, time.Hour, leases); err != nil || len(rs) != 3 {
		t.Fatalf("heartbeat: %v, %v", rs, err)
	}
	if n := held(); n != 3 {
		t.Fatalf("held after the heartbeat = %d; want 3", n)
	}
	// A release lowers it at once.
	if rel, err := s.Release(ctx, w.InstanceID, leases[:2]); err != nil || len(rel) != 2 {
		t.Fatalf("release: %v, %v", rel, err)
	}
	if n := held(); n != 1 {
		t.Fatalf("held after releasing 2 = %d; want 1", n)
	}
}

// A worker that stopped leaves the live count at once, but the partitions
// it has not released yet stay busy: counted until released (then as
// claimable), never twice.
func TestFairShareLoadCountsAStoppedWorkersLeasesUntilReleased(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	x, z := taskstore.Worker{InstanceID: "x#1", Name: "x"}, taskstore.Worker{InstanceID: "z#1", Name: "z"}
	for _, w := range []taskstore.Worker{x, z} {
		if _, err := s.Heartbeat(ctx, w, time.Hour, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position) SELECT 'p' || i, 10, 0 FROM generate_series(1, 4) i`); err != nil {
		t.Fatal(err)
	}
	cands, err := s.Candidates(ctx, 4)
	if err != nil || len(cands) != 4 {
		t.Fatalf("candidates: %v, %v", cands, err)
	}
	wx, err := s.Claim(ctx, x.InstanceID, time.Hour, cands[:2])
	if err != nil || len(wx) != 2 {
		t.Fatalf("x's claim: %v, %v", wx, err)
	}
	wz, err := s.Claim(ctx, z.InstanceID, time.Hour, cands[2:])
	if err != nil || len(wz) != 2 {
		t.Fatalf("z's claim: %v, %v", wz, err)
	}
	if err := s.StopWorker(ctx, z.InstanceID); err != nil {
		t.Fatal(err)
	}
	// Backlog: x's two claims (their claim raised x's backlog) and z's
	// leases, 10 items each.
	want := taskstore.Load{Busy: 4, LiveWorkers: 1, MinHeld: 2, Backlog: 40}
	if l, err := s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l != want {
		t.Fatalf("z stopped, holding 2: FairShareLoad = %+v, %v; want %+v", l, err, want)
	}
	if _, err := s.Release(ctx, z.InstanceID, []partition.Lease{wz[0].Lease, wz[1].Lease}); err != nil {
		t.Fatal(err)
	}
	want.Unclaimed = 2
	if l, err := s.FairShareLoad(ctx, "w#2", 8, time.Hour); err != nil || l != want {
		t.Fatalf("z released: FairShareLoad = %+v, %v; want %+v", l, err, want)
	}
}

// HeartbeatBelow rewrites only the leases with less than renewBelow left:
// the others are checked (still held, with the time they have left) but
// their rows are not written; the worker's row is renewed every time, and
// a lease that is no longer held is still reported missing.
func TestHeartbeatBelowRewritesOnlyLeasesRunningOut(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	s := taskstore.NewStore(db, "")
	w := taskstore.Worker{InstanceID: "w#1", Name: "w"}
	if _, err := s.Heartbeat(ctx, w, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `
		INSERT INTO baton.tasks (partition_key, available, position, owner, lease_expires_at, heartbeat_at)
		VALUES ('long', 5, 0, 'w#1', now() + interval '50 minutes', now() - interval '10 minutes'),
		       ('short', 5, 0, 'w#1', now() + interval '5 minutes', now() - interval '55 minutes'),
		       ('gone', 5, 0, 'other#1', now() + interval '50 minutes', now())`); err != nil {
		t.Fatal(err)
	}
	leases := []partition.Lease{{Key: "long"}, {Key: "short"}, {Key: "gone"}}
	var beatBefore time.Time
	if err := db.QueryRowContext(ctx, `SELECT heartbeat_at FROM baton.workers WHERE instance_id = 'w#1'`).Scan(&beatBefore); err != nil {
		t.Fatal(err)
	}
	rs, err := s.HeartbeatBelow(ctx, w, time.Hour, 30*time.Minute, leases)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]leaseinfo.Renewal{}
	for _, r := range rs {
		got[r.Key] = r
	}
	if len(rs) != 2 {
		t.Fatalf("renewals %+v; want long and short, not gone", rs)
	}
	if r := got["long"]; !r.Fresh || r.Locked || r.Remaining < 49*time.Minute || r.Remaining > 50*time.Minute {
		t.Fatalf("long: %+v; want fresh with about 50 minutes left", r)
	}
	if r := got["short"]; r.Fresh || r.Locked {
		t.Fatalf("short: %+v; want renewed", r)
	}
	var longLeft, shortLeft time.Duration
	var us1, us2 int64
	if err := db.QueryRowContext(ctx, `
		SELECT (SELECT extract(epoch FROM lease_expires_at - now()) * 1000000 FROM baton.tasks WHERE partition_key = 'long')::bigint,
		       (SELECT extract(epoch FROM lease_expires_at - now()) * 1000000 FROM baton.tasks WHERE partition_key = 'short')::bigint`).Scan(&us1, &us2); err != nil {
		t.Fatal(err)
	}
	longLeft, shortLeft = time.Duration(us1)*time.Microsecond, time.Duration(us2)*time.Microsecond
	if longLeft > 50*time.Minute || shortLeft < 59*time.Minute {
		t.Fatalf("leases left: long %s (want untouched, under 50m), short %s (want renewed to an hour)", longLeft, shortLeft)
	}
	var beatAfter time.Time
	if err := db.QueryRowContext(ctx, `SELECT heartbeat_at FROM baton.workers WHERE instance_id = 'w#1'`).Scan(&beatAfter); err != nil {
		t.Fatal(err)
	}
	if !beatAfter.After(beatBefore) {
		t.Fatalf("worker row not renewed: heartbeat_at %s then %s", beatBefore, beatAfter)
	}
}
