package faults

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/seed"
)

// One hot contract holding most of the records, split into many small
// segments that several workers price at once, under faults: a worker
// holding segments is SIGKILLed, another is SIGSTOPped until its segments
// are taken over and then resumed, the database restarts once meanwhile,
// and new records of the hot contract arrive in three more loads, two of
// them while segments are in flight (each large enough to be split
// again). At the end every
// record is priced exactly once with the right cumulative amounts (the
// export equals the independent recomputation, and the SQL verification
// finds nothing), the hot contract was split more than once, and segments
// of it were priced by several workers, including segments taken over
// from both faulted ones.
func TestHotContractSplitUnderFaults(t *testing.T) {
	srv := pgtest.Server(t)
	r := newRun(t, scenarioSeed(t))
	const segmentRecords = 2000
	o := seed.Options{Contracts: 14, RecordsPerContract: 5000, Seed: r.rng.Uint64(), Prefix: "f",
		Shape: seed.Shape{Kind: seed.Hot, Param: 6.0 / 7}}
	if isLong() {
		o.RecordsPerContract *= 3
	}
	hot := o.ContractID(0)
	// The records in four loads, cut at line boundaries of the generated
	// file: the first holds every record of the small contracts (the
	// generator interleaves contracts, and the hot one's records outlast
	// the others') and the hot contract's first; the other three hold
	// hot records only.
	loads := r.writeLoads(o, []float64{0.43, 0.62, 0.81})
	r.load(loads[0], r.tiers)

	isHotSegment := func(k string) bool {
		p, _, ok := partition.ParseSegmentKey(k)
		return ok && p == hot
	}
	args := []string{"--mode", "lock", "--segment-records", fmt.Sprint(segmentRecords), "--max-partitions", "3"}
	for range 4 {
		r.launch(r.dsn, args...)
	}
	stopWatch := r.watchHolders(hot)
	r.waitSplits(hot, 1)

	// 1. SIGKILL a worker holding segments of the hot contract; replace it.
	killed, killedSegs := r.victimHolding("a segment of "+hot, isHotSegment)
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.killed = true
	r.stats.fault("sigkill")
	t.Logf("killed %s holding %s", killed.name, strings.Join(killedSegs, ", "))
	r.launch(r.dsn, args...)

	// 2. New hot records while segments are in flight (the killed
	// worker's at least, until their leases end).
	r.waitSegmentsInFlight(hot)
	r.load(loads[1], "")
	r.stats.fault("concurrent_load")
	r.waitSplits(hot, 2)

	// 3. SIGSTOP another segment holder. Its segments stay in flight
	// until their leases end and others take them over, and meanwhile:
	stopped, stoppedSegs := r.victimHolding("a segment of "+hot, isHotSegment)
	if err := stopped.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped.stopped = true
	r.stats.fault("sigstop")
	t.Logf("stopped %s holding %s", stopped.name, strings.Join(stoppedSegs, ", "))

	// 4. more hot records arrive,
	r.waitSegmentsInFlight(hot)
	r.load(loads[2], "")
	r.stats.fault("concurrent_load")

	// 5. and the database restarts.
	r.waitSegmentsInFlight(hot)
	mode, name := pglocal.Fast, "fast"
	if r.rng.IntN(2) == 1 {
		mode, name = pglocal.Immediate, "immediate"
	}
	srv.Stop(mode)
	r.stats.fault("db_restart_" + name)
	time.Sleep(time.Duration(200+r.rng.IntN(1000)) * time.Millisecond) // the outage
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The test's idle connections died with the server (see
	// TestDatabaseRestart).
	r.db.SetMaxIdleConns(0)
	r.db.SetMaxIdleConns(2)

	// The stopped worker resumes once every task row it held has been
	// taken over.
	testutil.Eventually(t, time.Minute, "the stopped worker's task rows taken over", func() error {
		if held := r.heldBy(stopped.name); len(held) > 0 {
			return fmt.Errorf("%s still holds %s", stopped.name, strings.Join(held, ", "))
		}
		return nil
	})
	if err := stopped.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped.stopped = false

	// 6. The last hot records, after the restart.
	r.load(loads[3], "")
	r.stats.fault("concurrent_load")

	// Every record priced and every task row released: stop the workers.
	testutil.Eventually(t, 150*time.Second, "every record priced and every task row released", func() error {
		var busy, pending int64
		if err := r.db.QueryRow(`SELECT count(*) FILTER (WHERE owner IS NOT NULL), coalesce(sum(available - position) FILTER (WHERE position < available), 0)
			FROM baton.tasks`).Scan(&busy, &pending); err != nil {
			return err
		}
		if busy > 0 || pending > 0 {
			return fmt.Errorf("%d task rows held, %d records pending", busy, pending)
		}
		return nil
	})
	for _, w := range r.workers {
		if !w.killed {
			if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	most := stopWatch()
	r.waitAll(time.Minute)
	r.check()

	// The hot contract was split more than once (the first load and the
	// loads while it ran), and its segments were priced by several
	// workers, the faulted workers' segments by others after takeovers.
	var splits, segmentWorkers, pricedBy int
	if err := r.db.QueryRow(`SELECT count(*) FROM baton.events WHERE partition_key = ? AND kind = 'split'`, hot).Scan(&splits); err != nil {
		t.Fatal(err)
	}
	if err := r.db.QueryRow(`SELECT count(DISTINCT worker) FROM baton.events WHERE partition_key LIKE ? || '#%' AND kind = 'first_batch'`, hot).Scan(&segmentWorkers); err != nil {
		t.Fatal(err)
	}
	if err := r.db.QueryRow(`SELECT count(DISTINCT priced_by) FROM baton.priced WHERE contract_id = ?`, hot).Scan(&pricedBy); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d splits; segments priced by %d worker instances, its records by %d; at most %d workers held its segments at once",
		hot, splits, segmentWorkers, pricedBy, most)
	if splits < 2 {
		t.Errorf("%s was split %d times, want at least 2 (the first load's records and later ones)", hot, splits)
	}
	if segmentWorkers < 2 || pricedBy < 2 {
		t.Errorf("segments of %s were priced by %d workers (its records by %d), want several", hot, segmentWorkers, pricedBy)
	}
	for _, f := range []struct {
		w    *proc
		segs []string
	}{{killed, killedSegs}, {stopped, stoppedSegs}} {
		var n int
		if err := r.db.QueryRow(`SELECT count(*) FROM baton.events WHERE kind = 'takeover' AND prev_owner LIKE ? || '#%'
			AND partition_key LIKE ? || '#%'`, f.w.name, hot).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("no segment of %s that %s held (%s) was taken over", hot, f.w.name, strings.Join(f.segs, ", "))
		}
	}
	// Takeover times of the segments, from the events' own measure.
	rows, err := r.db.Query(`SELECT takeover_ms FROM baton.events WHERE kind = 'first_batch' AND takeover_ms IS NOT NULL
		AND partition_key LIKE ? || '#%'`, hot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var ms int64
		if err := rows.Scan(&ms); err != nil {
			t.Fatal(err)
		}
		r.stats.takeover(time.Duration(ms) * time.Millisecond)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// writeLoads writes the tiers of o (r.tiers) and its records cut into
// len(cuts)+1 record files at the given fractions of its lines, and
// returns their paths in order; r.load loads and records each.
func (r *run) writeLoads(o seed.Options, cuts []float64) []string {
	r.t.Helper()
	r.tiers = filepath.Join(r.dir, "tiers.csv")
	write(r.t, r.tiers, func(w io.Writer) error { return seed.WriteTiers(w, o) })
	var all bytes.Buffer
	if err := seed.WriteRecords(&all, o, nil); err != nil {
		r.t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(all.String(), "\n"), "\n")
	header, body := lines[0], lines[1:]
	var paths []string
	from := 0
	for i := range len(cuts) + 1 {
		to := len(body)
		if i < len(cuts) {
			to = int(cuts[i] * float64(len(body)))
		}
		path := filepath.Join(r.dir, fmt.Sprintf("records-%d.csv", i+1))
		part := body[from:to]
		write(r.t, path, func(w io.Writer) error {
			_, err := io.WriteString(w, header+strings.Join(part, "")+"\n")
			return err
		})
		paths = append(paths, path)
		from = to
	}
	return paths
}

// waitSplits waits until contract has been split n times.
func (r *run) waitSplits(contract string, n int) {
	r.t.Helper()
	testutil.Eventually(r.t, time.Minute, fmt.Sprintf("%s split %d times", contract, n), func() error {
		var got int
		if err := r.db.QueryRow(`SELECT count(*) FROM baton.events WHERE partition_key = ? AND kind = 'split'`, contract).Scan(&got); err != nil {
			return err
		}
		if got < n {
			return fmt.Errorf("split %d times", got)
		}
		return nil
	})
}

// waitSegmentsInFlight waits until a segment of contract is held and has
// records left to price.
func (r *run) waitSegmentsInFlight(contract string) {
	r.t.Helper()
	testutil.Eventually(r.t, time.Minute, "a segment of "+contract+" in flight", func() error {
		var n int
		if err := r.db.QueryRow(`SELECT count(*) FROM baton.tasks WHERE segment_of = ? AND owner IS NOT NULL
			AND position < available`, contract).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no segment of %s held with records left", contract)
		}
		return nil
	})
}

// watchHolders samples, every PollInterval, how many workers hold live
// leases on segments of contract at once; the function it returns stops
// the sampling (as does the test's end) and gives the most seen.
func (r *run) watchHolders(contract string) (stop func() int) {
	done, out := make(chan struct{}), make(chan int, 1)
	go func() {
		most := 0
		tick := time.NewTicker(testutil.PollInterval)
		defer tick.Stop()
		for {
			var n int
			// Errors (the database restarting) only skip a sample.
			if err := r.db.QueryRow(`SELECT count(DISTINCT owner) FROM baton.tasks WHERE segment_of = ?
				AND owner IS NOT NULL AND lease_expires_at > clock_timestamp()`, contract).Scan(&n); err == nil {
				most = max(most, n)
			}
			select {
			case <-done:
				out <- most
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	most := 0
	stop = func() int {
		once.Do(func() { close(done); most = <-out })
		return most
	}
	r.t.Cleanup(func() { stop() })
	return stop
}
