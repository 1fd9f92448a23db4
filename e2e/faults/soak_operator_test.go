package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/internal/testutil"
)

// The soak's operator faults: what an operator does to the data while
// batches run, beside the process, network and database faults. Re-rating
// rewinds contracts under the workers (a tier change re-priced with
// "worker load --tiers --reprice", a plain "worker reprice", amended
// amounts with "worker load --amend", which rewind a contract to its start
// or to the amended record); "worker prune" removes finished loads while
// the loader goes on re-delivering records; and a pruned load's file is
// loaded again, whose records must all be skipped as re-delivered (a
// record accepted again would be billed twice, which the check of the
// export finds too).
//
// The contracts are of two kinds, so that the two never meet: "worker
// reprice" refuses a contract with pruned records, by design. Every third
// contract (f-000000, f-000003, ...) is a pruned one: some loads carry new
// records of pruned contracts only, and only those loads are pruned, never
// the first load (every contract's). The others are re-rated. Amendments
// change records of the first load only, which is never re-delivered, so
// that a re-delivery never carries an amount an amendment replaced (it
// would be refused).
//
// A load is pruned only once the load after it has committed: the loader
// re-delivers records of the previous load only, so no record of a pruned
// load is ever delivered by the loader; pruned records are re-delivered
// only by the "redeliver_pruned" fault, which loads a pruned file again.
var soakOperatorFaults = []struct {
	kind   string
	weight int
}{
	{"tier_change", 25},
	{"reprice", 25},
	{"amend", 25},
	{"prune", 25},
	{"redeliver_pruned", 15},
}

// pruneClass reports whether contract index c is one of the pruned
// contracts.
func pruneClass(c int) bool { return c%3 == 0 }

// classContracts lists the contract indexes of one kind.
func (s *soak) classContracts(pruned bool) []int {
	var out []int
	for c := range s.cfg.contracts {
		if pruneClass(c) == pruned {
			out = append(out, c)
		}
	}
	return out
}

func contractID(c int) string { return fmt.Sprintf("f-%06d", c) }

// operator injects an operator fault every few seconds until the count is
// reached or ctx ends.
func (s *soak) operator(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil && s.injected.Load() < int64(s.cfg.faults) {
		sleepCtx(ctx, between(rng, 2*time.Second, 5*time.Second))
		if ctx.Err() != nil || s.injected.Load() >= int64(s.cfg.faults) {
			return
		}
		kind := pickOperatorFault(rng)
		s.mu.Lock()
		prunable := len(s.prunable)
		s.mu.Unlock()
		s.loadMu.Lock()
		pruned := len(s.r.prunedFiles)
		s.loadMu.Unlock()
		switch {
		case prunable > 0 && pruned == 0:
			kind = "prune" // the first prune as soon as it can be: short runs have one
		case kind == "prune" && prunable == 0:
			kind = "reprice"
		case kind == "redeliver_pruned" && pruned == 0:
			kind = "amend"
		}
		start := time.Now()
		if err := s.operate(rng, kind); err != nil {
			s.problem("%s: %v", kind, err)
			continue
		}
		s.logFault(kind, "operator", "", start, time.Now())
	}
}

func pickOperatorFault(rng *rand.Rand) string {
	total := 0
	for _, f := range soakOperatorFaults {
		total += f.weight
	}
	n := rng.IntN(total)
	for _, f := range soakOperatorFaults {
		if n < f.weight {
			return f.kind
		}
		n -= f.weight
	}
	panic("unreachable")
}

// operate applies one operator fault; a fault that cannot be applied now
// (a prune of a load whose records are not all priced yet) is a no-op, and
// its load is tried again later.
func (s *soak) operate(rng *rand.Rand, kind string) error {
	r := s.r
	rerated := s.classContracts(false)
	rng.Shuffle(len(rerated), func(i, j int) { rerated[i], rerated[j] = rerated[j], rerated[i] })
	some := rerated[:1+rng.IntN(2)]
	s.mu.Lock()
	s.opSeq++
	seq := s.opSeq
	s.mu.Unlock()
	switch kind {
	case "tier_change":
		path := filepath.Join(r.dir, fmt.Sprintf("tiers-%d.csv", seq))
		var b strings.Builder
		b.WriteString("contract_id,threshold_minor,discount_bp\n")
		for _, c := range some {
			fmt.Fprintf(&b, "%s,0,%d\n%s,%d,%d\n", contractID(c), rng.IntN(300), contractID(c),
				1+rng.IntN(200_000), 300+rng.IntN(2000))
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		s.loadMu.Lock()
		defer s.loadMu.Unlock()
		if err := s.cliRetry([]int{0}, "load", "--tiers", path, "--reprice", "--reason", "soak tier change"); err != nil {
			return err
		}
		r.tierUpdates = append(r.tierUpdates, path) // read by the check, after this goroutine ends
		return nil
	case "reprice":
		args := []string{"reprice", "--reason", "soak re-pricing"}
		for _, c := range some {
			args = append(args, contractID(c))
		}
		return s.cliRetry([]int{0}, args...)
	case "amend":
		path := filepath.Join(r.dir, fmt.Sprintf("records-amend-%d.csv", seq))
		first := map[string][]string{} // contract → record ids of the first load
		readCSV(s.t, s.firstRecords, func(f []string) { first[f[0]] = append(first[f[0]], f[1]) })
		var b strings.Builder
		b.WriteString("contract_id,record_id,amount_minor\n")
		for _, c := range some {
			ids := first[contractID(c)]
			for _, i := range rng.Perm(len(ids))[:1+rng.IntN(3)] { // distinct records
				fmt.Fprintf(&b, "%s,%s,%d\n", contractID(c), ids[i], 1+rng.IntN(90_000))
			}
			fmt.Fprintf(&b, "%s,amend-new-%d-%d,%d\n", contractID(c), seq, c, 1+rng.IntN(90_000))
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		// Under the loads' lock: the new records' place in acceptance
		// order is the order of the inputs.
		s.loadMu.Lock()
		defer s.loadMu.Unlock()
		if err := s.cliRetry([]int{0}, "load", "--records", path, "--amend", "--reason", "soak amendment"); err != nil {
			return err
		}
		r.inputs = append(r.inputs, path)
		r.amendFiles = append(r.amendFiles, path)
		return nil
	case "prune":
		s.mu.Lock()
		path := s.prunable[0] // the oldest: the likeliest to be priced by now
		s.mu.Unlock()
		ids, err := s.loadIDs(path)
		if err != nil {
			return nil // the database restarting: tried again later
		}
		args := []string{"prune", "--batch-size", "500", "--load"}
		for _, id := range ids {
			args = append(args, strconv.FormatInt(id, 10))
		}
		// Exit 4: records of the load are not all priced yet; nothing
		// was removed.
		err = s.cliRetry([]int{0, 4}, args...)
		if err != nil {
			return err
		}
		if s.lastExit == 4 {
			s.mu.Lock()
			s.pruneSkips++
			s.mu.Unlock()
			return nil
		}
		s.mu.Lock()
		s.prunable = slices.DeleteFunc(s.prunable, func(p string) bool { return p == path })
		s.mu.Unlock()
		s.loadMu.Lock()
		r.prunedFiles = append(r.prunedFiles, path)
		s.loadMu.Unlock()
		return nil
	case "redeliver_pruned":
		// Under the loads' lock, as every load: were a record accepted
		// again, its place in acceptance order would be this one.
		s.loadMu.Lock()
		defer s.loadMu.Unlock()
		path := r.prunedFiles[rng.IntN(len(r.prunedFiles))]
		if err := s.cliRetry([]int{0}, "load", "--records", path); err != nil {
			return err
		}
		if !strings.Contains(s.lastOut, " 0 records accepted, ") {
			return fmt.Errorf("loading the pruned %s again accepted records (each would be billed twice):\n%s", filepath.Base(path), s.lastOut)
		}
		s.mu.Lock()
		s.redeliveredPruned++
		s.mu.Unlock()
		return nil
	}
	return fmt.Errorf("unknown operator fault %q", kind)
}

// loadIDs are the loads of a records file (a load repeated after a failure
// has several, the later ones re-deliveries).
func (s *soak) loadIDs(path string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := s.r.db.QueryContext(ctx, `SELECT load_id FROM baton.loads WHERE records_file = ? ORDER BY load_id`, path)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no load of %s", path)
	}
	return out, nil
}

// cliRetry runs the worker binary with args on the database until it exits
// with one of the codes in ok (its code and output are left in s.lastExit
// and s.lastOut), repeating
// it while it exits 1 (the database restarting), for at most two minutes.
// Every operator command is safe to repeat: a load or re-pricing that
// committed before its exit status was lost changes nothing the second
// time that the check depends on.
func (s *soak) cliRetry(ok []int, args ...string) error {
	deadline := time.Now().Add(testutil.WaitTimeout(2 * time.Minute))
	for attempt := 1; ; attempt++ {
		cmd := exec.Command(workerBin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+s.r.dsn)
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			return fmt.Errorf("worker %s: %w", strings.Join(args, " "), err)
		}
		if slices.Contains(ok, code) {
			s.lastExit, s.lastOut = code, string(out)
			return nil
		}
		if !s.retriable(code) {
			return fmt.Errorf("worker %s: exit %d (not a database failure)\n%s", strings.Join(args, " "), code, out)
		}
		s.mu.Lock()
		s.opFails++
		s.mu.Unlock()
		if time.Now().After(deadline) {
			return fmt.Errorf("worker %s: still failing after %d attempts: %v\n%s", strings.Join(args, " "), attempt, err, out)
		}
		time.Sleep(300 * time.Millisecond) // back-off before the repeat
	}
}
