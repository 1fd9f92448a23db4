package ingest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
)

// Inserts through the records view and loads of the same contract are
// serialised by the load lock, so the view's checks for a seq or record id
// the contract already has see every record stored before them. Each test
// below runs one interleaving deterministically: where the second party
// has to wait, it is seen queued for the load lock (in pg_locks) before
// the first commits.

// async runs f in a goroutine; done is closed once err is set.
type async struct {
	done chan struct{}
	err  error
}

func start(f func() error) *async {
	a := &async{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.err = f()
	}()
	return a
}

func (a *async) wait() error {
	<-a.done
	return a.err
}

// viewInsert inserts one record of load 0 through the records view. marker
// leads the statement's text so that pg_stat_activity shows which it is.
func viewInsert(ctx context.Context, db bun.IDB, marker, contract string, seq int64, id string, amount int64) error {
	_, err := db.ExecContext(ctx, "/* "+marker+" */ INSERT INTO baton.records (contract_id, seq, record_id, amount_minor, load_id) VALUES (?, ?, ?, ?, 0)",
		contract, seq, id, amount)
	return err
}

// begin starts a transaction on its own connection, rolled back at the
// test's end unless it was committed.
func begin(t *testing.T, db *bun.DB, iso sql.IsolationLevel) bun.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// waitQueued waits until a session whose current statement contains marker
// ("" for any session of the test's database) waits for a lock, or until a
// finishes first. It reports whether the session queued, and fails the
// test (going on) if the lock it waits for is not the load lock: the
// advisory lock on loadLockKey (classid its high 32 bits, objid its low,
// objsubid 1 for a single bigint key).
func waitQueued(t *testing.T, db *bun.DB, marker string, a *async) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var locktype string
		var objsubid int64
		var key sql.NullInt64
		err := db.QueryRowContext(context.Background(), `
SELECT l.locktype, coalesce(l.objsubid, 0), (l.classid::bigint << 32) | l.objid::bigint
  FROM pg_stat_activity s JOIN pg_locks l ON l.pid = s.pid
 WHERE s.datname = current_database() AND s.pid <> pg_backend_pid() AND strpos(s.query, ?) > 0 AND NOT l.granted
 LIMIT 1`, marker).Scan(&locktype, &objsubid, &key)
		switch {
		case err == nil:
			if locktype != "advisory" || objsubid != 1 || key.Int64 != loadLockKey {
				t.Errorf("the %q session waits for a lock of type %s (objsubid %d, key %#x), not for the load lock (advisory, key %#x)",
					marker, locktype, objsubid, key.Int64, loadLockKey)
			}
			return true
		case !errors.Is(err, sql.ErrNoRows):
			t.Fatal(err)
		}
		select {
		case <-a.done:
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the %q session to queue for a lock or finish", marker)
		}
		time.Sleep(10 * time.Millisecond) // pg_locks offers no notification
	}
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// checkStored compares a contract's records with want (record id@seq in
// seq order) and checks that no seq or record id is stored twice anywhere.
func checkStored(t *testing.T, db *bun.DB, contract string, want ...string) {
	t.Helper()
	var got []string
	for _, r := range storedRecords(t, db) {
		if r.Contract == contract {
			got = append(got, fmt.Sprintf("%s@%d", r.RecordID, r.Seq))
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("records of %s: %v, want %v", contract, got, want)
	}
	var dupSeqs, dupIDs int
	if err := db.QueryRowContext(context.Background(), `SELECT
		(SELECT count(*) FROM (SELECT 1 FROM baton.records GROUP BY contract_id, seq HAVING count(*) > 1) s),
		(SELECT count(*) FROM (SELECT 1 FROM baton.records GROUP BY contract_id, record_id HAVING count(*) > 1) i)`).
		Scan(&dupSeqs, &dupIDs); err != nil {
		t.Fatal(err)
	}
	if dupSeqs > 0 || dupIDs > 0 {
		t.Errorf("%d seqs and %d record ids stored twice", dupSeqs, dupIDs)
	}
}

// Two transactions insert the same record id (then the same seq) of one
// contract through the view. The second queues behind the first on the
// load lock and, once the first commits, fails with unique_violation.
func TestViewInsertsOfOneContractSerialise(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		seq    int64
		id     string
		stored []string
	}{
		{"same record id", 2, "x", []string{"x@1"}},
		{"same seq", 1, "y", []string{"x@1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			a, b := begin(t, db, sql.LevelReadCommitted), begin(t, db, sql.LevelReadCommitted)
			if err := viewInsert(ctx, a, "insert A", "c", 1, "x", 10); err != nil {
				t.Fatal(err)
			}
			ins := start(func() error { return viewInsert(ctx, b, "insert B", "c", c.seq, c.id, 20) })
			if !waitQueued(t, db, "insert B", ins) {
				t.Errorf("B's insert finished (%v) while A's was uncommitted; want it to wait for the load lock", ins.err)
			}
			if err := a.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := ins.wait(); sqlState(err) != "23505" {
				t.Errorf("B's insert after A's commit: %v, want SQLSTATE 23505", err)
			}
			_ = b.Commit()
			checkStored(t, db, "c", c.stored...)
		})
	}
}

// A transaction above READ COMMITTED reads the chunks as of its snapshot,
// taken before it could wait for the load lock, so the view's checks could
// miss a record committed meanwhile: its inserts are refused.
func TestViewInsertRefusedAboveReadCommitted(t *testing.T) {
	t.Parallel()
	for _, iso := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(iso.String(), func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			a, b := begin(t, db, sql.LevelReadCommitted), begin(t, db, iso)
			if err := viewInsert(ctx, a, "insert A", "c", 1, "x", 10); err != nil {
				t.Fatal(err)
			}
			ins := start(func() error { return viewInsert(ctx, b, "insert B", "c", 2, "x", 20) })
			waitQueued(t, db, "insert B", ins)
			if err := a.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := ins.wait(); sqlState(err) != "0A000" {
				t.Errorf("insert in a %s transaction: %v, want SQLSTATE 0A000", iso, err)
			}
			_ = b.Commit()
			checkStored(t, db, "c", "x@1")
		})
	}
}

// pausedLoad starts a load that stops once its records are stored, before
// it locks the task rows and commits: it then holds the load lock and its
// chunks are not yet visible to others. resume lets it finish.
type pausedLoad struct {
	*async
	resume func()
	rep    Report
}

func startPausedLoad(t *testing.T, db *bun.DB, opts Options) *pausedLoad {
	t.Helper()
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	opts.Progress = func(stage string, _ int64) {
		if stage == StageUpdating {
			close(paused)
			<-resume
		}
	}
	p := &pausedLoad{resume: func() { once.Do(func() { close(resume) }) }}
	p.async = start(func() (err error) {
		p.rep, err = load(context.Background(), db, opts)
		return err
	})
	t.Cleanup(func() {
		p.resume()
		<-p.done
	})
	select {
	case <-paused:
	case <-p.done:
		t.Fatalf("the load ended before pausing: %v", p.err)
	}
	return p
}

// A view insert while a load of the same contract is between storing its
// records and committing waits for the load, then finds the load's record
// id, or its seq, and fails with unique_violation.
func TestViewInsertDuringLoad(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		seq  int64
		id   string
	}{
		{"same record id", 4, "r2"},
		{"same seq", 2, "v"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			ctx := context.Background()
			mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers)})
			load := startPausedLoad(t, db, Options{RecordsPath: writeFile(t, "r.csv", rh+"c1,r1,10\nc1,r2,20\nc1,r3,30\n")})

			tx := begin(t, db, sql.LevelReadCommitted)
			ins := start(func() error { return viewInsert(ctx, tx, "view insert", "c1", c.seq, c.id, 20) })
			if !waitQueued(t, db, "view insert", ins) {
				t.Errorf("the view insert finished (%v) during the load; want it to wait for the load lock", ins.err)
			}
			load.resume()
			if err := load.wait(); err != nil {
				t.Fatalf("load: %v", err)
			}
			if err := ins.wait(); sqlState(err) != "23505" {
				t.Errorf("view insert after the load's commit: %v, want SQLSTATE 23505", err)
			}
			_ = tx.Commit()
			checkStored(t, db, "c1", "r1@1", "r2@2", "r3@3")
		})
	}
}

// A load that starts while a view insert of the same contract is
// uncommitted waits for it at the load lock, then sees its record: the
// same id and amount is a re-delivery, skipped.
func TestLoadWaitsForViewInsert(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,r0,10\n")})
	tx := begin(t, db, sql.LevelReadCommitted)
	if err := viewInsert(ctx, tx, "view insert", "c1", 2, "x", 20); err != nil {
		t.Fatal(err)
	}
	var rep Report
	load := start(func() (err error) {
		rep, err = load(ctx, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,x,20\n")})
		return err
	})
	if !waitQueued(t, db, "", load) {
		t.Errorf("the load finished (%v) while the view insert was uncommitted; want it to wait for the load lock", load.err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := load.wait(); err != nil {
		t.Fatalf("load after the view insert: %v", err)
	}
	if rep.RecordsAccepted != 0 || rep.RecordsRedelivered != 1 {
		t.Errorf("load report %+v, want x re-delivered and nothing accepted", rep)
	}
	checkStored(t, db, "c1", "r0@1", "x@2")
}

// A record inserted through the view takes the seq after the contract's
// last stored one, where a producer numbers new items (available + 1 when
// the records up to available are stored). A transaction that does so and
// then raises available with the producer API takes the locks in the
// loader's order (the load lock, then the task row), so a load queued
// behind it neither deadlocks nor overlaps: it numbers its records after
// them.
func TestViewInsertThenAddWorkBeforeLoad(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,r0,10\n")})
	tx := begin(t, db, sql.LevelReadCommitted)
	for i, id := range []string{"v2", "v3"} {
		if err := viewInsert(ctx, tx, "view insert", "c1", int64(i+2), id, 5); err != nil {
			t.Fatal(err)
		}
	}
	load := start(func() error {
		_, err := load(ctx, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,n4,7\n")})
		return err
	})
	if !waitQueued(t, db, "", load) {
		t.Errorf("the load finished (%v) while the view inserts were uncommitted; want it to wait for the load lock", load.err)
	}
	if _, err := partition.NewStore(nil, "").Kind(taskKind).AddWorkTx(ctx, tx, "c1", 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := load.wait(); err != nil {
		t.Fatalf("load after the view inserts: %v", err)
	}
	checkStored(t, db, "c1", "r0@1", "v2@2", "v3@3", "n4@4")
	if c := tableCounts(t, db); c.Available != 4 {
		t.Errorf("available %d, want 4", c.Available)
	}
}

// A record inserted through the view above available sits where the next
// load numbers its first record, so that load fails on the seq instead of
// storing a second record there; a seq further on, which a load could
// cover with a chunk without starting at it, is refused (check_violation).
func TestViewInsertSeqAfterLastStored(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	mustLoad(t, db, Options{TiersPath: writeFile(t, "t.csv", goodTiers), RecordsPath: writeFile(t, "r1.csv", rh+"c1,r0,10\n")})
	if err := viewInsert(ctx, db, "gap", "c1", 4, "g", 5); sqlState(err) != "23514" {
		t.Errorf("inserting seq 4 after seq 1: %v, want SQLSTATE 23514", err)
	}
	if err := viewInsert(ctx, db, "fresh contract", "new", 2, "g", 5); sqlState(err) != "23514" {
		t.Errorf("inserting seq 2 into a contract without records: %v, want SQLSTATE 23514", err)
	}
	// Whatever was let in, a load of five more records must not overlap it.
	_, err := load(ctx, db, Options{RecordsPath: writeFile(t, "r2.csv", rh+"c1,n2,1\nc1,n3,1\nc1,n4,1\nc1,n5,1\nc1,n6,1\n")})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	checkStored(t, db, "c1", "r0@1", "n2@2", "n3@3", "n4@4", "n5@5", "n6@6")

	if err := viewInsert(ctx, db, "next", "c1", 7, "s", 5); err != nil {
		t.Fatalf("inserting seq 7 after seq 6: %v", err)
	}
	_, err = load(ctx, db, Options{RecordsPath: writeFile(t, "r3.csv", rh+"c1,m7,1\nc1,m8,1\n")})
	if err == nil || !strings.Contains(err.Error(), "record_chunks_pkey") {
		t.Errorf("load after a record stored above available: %v, want a failure on record_chunks_pkey", err)
	}
	checkStored(t, db, "c1", "r0@1", "n2@2", "n3@3", "n4@4", "n5@5", "n6@6", "s@7")
}
