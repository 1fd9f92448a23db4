package faults

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// The soak's checker. It knows nothing of the packages under test: it
// reads the evidence the soak leaves (the scheduled jobs' own lines, the
// soak client's rows, the fault log) and checks the guarantees baton makes
// against it. Each check returns how much it looked at and its violations;
// the soak fails on any violation. The pricing checks are the suite's own
// (run.check: export against an independent recomputation, and the SQL
// verification).

// soakFault is one injected fault: which process it hit (a worker's or
// client's name, "w3", "c2"), or every process (Target "", a database
// restart), and when, on this machine's clock (the database's too: the
// server runs here).
type soakFault struct {
	Kind       string
	Target     string
	Start, End time.Time
}

// hits reports whether f touched process name at some moment in [from, to].
func (f soakFault) hits(name string, from, to time.Time) bool {
	return (f.Target == "" || f.Target == name) && !f.Start.After(to) && !f.End.Before(from)
}

// jobRun is one run of a scheduled job's command, from its evidence lines.
type jobRun struct {
	Job      string
	Slot     time.Time
	Fence    int64
	Worker   string // the worker process's name (BATON_WORKER up to '#')
	Instance string // BATON_WORKER
	PID      int
	Start    time.Time
	End      time.Time // zero: no end line
	How      string    // ok, term, or "" without an end line
}

// runKey names a run as the worker logs it.
type runKey struct {
	Job   string
	Slot  int64 // Unix microseconds
	Fence int64
}

func (r jobRun) key() runKey { return runKey{r.Job, r.Slot.UnixMicro(), r.Fence} }

// leaderWrite is one committed fenced write of a leader: seq is its place in
// commit order (the register row's lock orders them).
type leaderWrite struct {
	Seq   int64
	Token int64
	Owner string
}

// lockHold is one committed hold of an entity lock: the counter value its
// read-modify-write stored, and the interval it held the lock for (a part
// of it, on the database clock).
type lockHold struct {
	Key      string
	Holder   string
	N        int64
	From, To time.Time
}

// checkResult is one line of the soak's table of checks.
type checkResult struct {
	Name       string
	Checked    int
	Violations []string
	// Allowed counts the cases the guarantee permits and the check let
	// pass (a slot run again after a fault on its runner, runs overlapping
	// while the earlier runner was paused).
	Allowed int
}

func (c *checkResult) violate(format string, args ...any) {
	c.Violations = append(c.Violations, fmt.Sprintf(format, args...))
}

// jobEvidence is what the job checks read.
type jobEvidence struct {
	Runs   []jobRun
	Faults []soakFault
	// Excused are runs whose worker logged that it lost the run's lease or
	// could not record its completion (job_lost, job_fenced, or
	// job_cancelled by a shutdown): the slot is then run again, as
	// documented, without an injected fault on that worker.
	Excused map[runKey]string
	// KilledAt is when each SIGKILLed worker died; its command died with it
	// (parent-death signal), leaving no end line.
	KilledAt map[string]time.Time
	// CatchUp are the jobs with missed-slot policy catch-up, by interval:
	// every slot from their first run to their last must have run.
	CatchUp map[string]time.Duration
	// Leader are the jobs in leader mode, which keep their fencing token
	// from one slot to the next while their worker lives.
	Leader map[string]bool
}

// pausedDuring reports whether the worker was SIGSTOPped at some moment in
// [from, to]: a paused worker cannot stop its command, which goes on
// running after the lease has passed to another worker.
func pausedDuring(faults []soakFault, worker string, from, to time.Time) bool {
	for _, f := range faults {
		if f.Kind == "sigstop" && f.Target == worker && f.hits(worker, from, to) {
			return true
		}
	}
	return false
}

func faultedDuring(faults []soakFault, worker string, from, to time.Time) (string, bool) {
	for _, f := range faults {
		if f.hits(worker, from, to) {
			return f.Kind, true
		}
	}
	return "", false
}

// killRace bounds how long after its worker's SIGKILL a run's start line may
// come: a command forked just before the kill can start and write its first
// line while the dying worker's exit is still under way, and dies when that
// exit ends (the parent-death signal).
const killRace = time.Second

// runEnd is when a run's command ended: its end line, else its worker's
// death, else never (zero, ok false).
func (e jobEvidence) runEnd(r jobRun) (time.Time, bool) {
	if !r.End.IsZero() {
		return r.End, true
	}
	if at, ok := e.KilledAt[r.Worker]; ok && r.Start.Sub(at) <= killRace {
		if at.Before(r.Start) {
			return r.Start, true
		}
		return at, true
	}
	return time.Time{}, false
}

// checkJobs checks the scheduled jobs' runs:
//
//   - runs of one job never overlap in time while both owners are live (the
//     earlier runner's worker was not paused): a worker cut off from the
//     database stops its run before its lease can pass to another;
//   - a slot runs again only if its earlier run was disturbed: an injected
//     fault on that run's worker (or on the database) between its start
//     (less 2s, for a fault whose effect on the connections outlasts it) and
//     the re-run, or the worker's own log saying it lost the run;
//   - a fencing token is never held by two workers, and one slot is never
//     run twice under the same token;
//   - every slot of a catch-up job runs;
//   - every run ends (an end line, or its worker was killed).
func checkJobs(e jobEvidence) []checkResult {
	overlap := checkResult{Name: "job runs overlapping (both owners live)"}
	twice := checkResult{Name: "job slot run twice by live owners"}
	tokens := checkResult{Name: "job fencing token reused (two owners or one slot)"}
	missed := checkResult{Name: "catch-up job slots missed"}
	unended := checkResult{Name: "job runs never ended (worker not killed)"}

	byJob := map[string][]jobRun{}
	for _, r := range e.Runs {
		byJob[r.Job] = append(byJob[r.Job], r)
	}
	for _, job := range slices.Sorted(maps.Keys(byJob)) {
		runs := byJob[job]
		slices.SortFunc(runs, func(a, b jobRun) int { return a.Start.Compare(b.Start) })

		// Overlap: each run against the later ones started while it ran,
		// one violation per run overlapped.
		overlap.Checked += len(runs)
		for i, a := range runs {
			end, ended := e.runEnd(a)
			var later []jobRun
			for _, b := range runs[i+1:] {
				if ended && !end.After(b.Start) {
					break // sorted by start: no later run starts before a's end
				}
				if pausedDuring(e.Faults, a.Worker, a.Start, b.Start) {
					overlap.Allowed++
					continue
				}
				later = append(later, b)
			}
			if len(later) == 0 {
				continue
			}
			until := "it never ended"
			if ended {
				until = "until " + end.Format("15:04:05.000")
			}
			b := later[0]
			overlap.violate("job %s: the run of slot %s (fence %d, %s, from %s) was running %s, and %s was not paused, when %d later run(s) started, the first of slot %s (fence %d, %s) at %s",
				job, fmtSlot(a.Slot), a.Fence, a.Instance, a.Start.Format("15:04:05.000"), until, a.Worker, len(later),
				fmtSlot(b.Slot), b.Fence, b.Instance, b.Start.Format("15:04:05.000"))
		}

		// Tokens: one owner per token, and (outside leader mode) one slot
		// per token.
		owners := map[int64]map[string]bool{}
		for _, r := range runs {
			if owners[r.Fence] == nil {
				owners[r.Fence] = map[string]bool{}
			}
			owners[r.Fence][r.Instance] = true
		}
		tokens.Checked += len(owners)
		for _, f := range slices.Sorted(maps.Keys(owners)) {
			if len(owners[f]) > 1 {
				tokens.violate("job %s: fence %d held by %s", job, f, strings.Join(slices.Sorted(maps.Keys(owners[f])), ", "))
			}
		}

		// Slots run more than once.
		bySlot := map[int64][]jobRun{}
		for _, r := range runs {
			bySlot[r.Slot.UnixMicro()] = append(bySlot[r.Slot.UnixMicro()], r)
		}
		twice.Checked += len(bySlot)
		for _, s := range slices.Sorted(maps.Keys(bySlot)) {
			rs := bySlot[s]
			slices.SortFunc(rs, func(a, b jobRun) int { return cmp.Or(cmp.Compare(a.Fence, b.Fence), a.Start.Compare(b.Start)) })
			for i := 1; i < len(rs); i++ {
				a, b := rs[i-1], rs[i]
				if a.Fence == b.Fence {
					tokens.violate("job %s: slot %s run twice under fence %d (%s at %s, %s at %s)", job, fmtSlot(a.Slot),
						a.Fence, a.Instance, a.Start.Format("15:04:05.000"), b.Instance, b.Start.Format("15:04:05.000"))
					continue
				}
				if _, ok := e.Excused[a.key()]; ok {
					twice.Allowed++
					continue
				}
				if _, ok := faultedDuring(e.Faults, a.Worker, a.Start.Add(-2*time.Second), b.Start); ok {
					twice.Allowed++
					continue
				}
				twice.violate("job %s: slot %s ran under fence %d on %s (%s, start %s) and again under fence %d on %s at %s; no fault hit %s in between and it did not report the run lost",
					job, fmtSlot(a.Slot), a.Fence, a.Instance, a.How, a.Start.Format("15:04:05.000"), b.Fence, b.Instance,
					b.Start.Format("15:04:05.000"), a.Worker)
			}
		}

		// Catch-up: no slot skipped between the first and the last.
		if every, ok := e.CatchUp[job]; ok && len(bySlot) > 0 {
			slots := slices.Sorted(maps.Keys(bySlot))
			step := every.Microseconds()
			missed.Checked += int((slots[len(slots)-1]-slots[0])/step) + 1
			for s := slots[0]; s <= slots[len(slots)-1]; s += step {
				if _, ok := bySlot[s]; !ok {
					missed.violate("job %s: slot %s never ran (runs from %s to %s)", job, fmtSlot(time.UnixMicro(s)),
						fmtSlot(time.UnixMicro(slots[0])), fmtSlot(time.UnixMicro(slots[len(slots)-1])))
				}
			}
		}

		unended.Checked += len(runs)
		for _, r := range runs {
			if _, ok := e.runEnd(r); !ok {
				killed := "was not killed"
				if at, ok := e.KilledAt[r.Worker]; ok {
					killed = fmt.Sprintf("was killed at %s, %s before the run began", at.Format("15:04:05.000"), r.Start.Sub(at))
				}
				unended.violate("job %s: the run of slot %s (fence %d, %s, pid %d, from %s) has no end line and its worker %s",
					job, fmtSlot(r.Slot), r.Fence, r.Instance, r.PID, r.Start.Format("15:04:05.000"), killed)
			}
		}
	}
	return []checkResult{overlap, twice, tokens, missed, unended}
}

func fmtSlot(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// checkLeaders checks the leaders' fenced writes in commit order: tokens
// never go down (a deposed leader's write never commits after its
// successor's), each token belongs to one owner, and the sequence is whole.
func checkLeaders(writes []leaderWrite) []checkResult {
	order := checkResult{Name: "leader writes out of token order", Checked: len(writes)}
	owners := checkResult{Name: "leader token with two owners"}
	seq := checkResult{Name: "leader write sequence broken", Checked: len(writes)}
	ws := slices.Clone(writes)
	slices.SortFunc(ws, func(a, b leaderWrite) int { return cmp.Compare(a.Seq, b.Seq) })
	byToken := map[int64]map[string]bool{}
	for i, w := range ws {
		if w.Seq != int64(i+1) {
			seq.violate("write %d of %d has seq %d", i+1, len(ws), w.Seq)
		}
		if i > 0 && w.Token < ws[i-1].Token {
			order.violate("seq %d: token %d (%s) committed after token %d (%s)", w.Seq, w.Token, w.Owner, ws[i-1].Token, ws[i-1].Owner)
		}
		if byToken[w.Token] == nil {
			byToken[w.Token] = map[string]bool{}
		}
		byToken[w.Token][w.Owner] = true
	}
	owners.Checked = len(byToken)
	for _, t := range slices.Sorted(maps.Keys(byToken)) {
		if len(byToken[t]) > 1 {
			owners.violate("token %d written by %s", t, strings.Join(slices.Sorted(maps.Keys(byToken[t])), ", "))
		}
	}
	if len(seq.Violations) > 5 {
		seq.Violations = append(seq.Violations[:5], fmt.Sprintf("and %d more", len(seq.Violations)-5))
	}
	return []checkResult{order, owners, seq}
}

// checkLocks checks the entity locks' holds per key: no two intervals
// overlap, and the unprotected counter each hold incremented lost no
// update (its stored values are exactly 1..n, and n is the final counter).
func checkLocks(holds []lockHold, counters map[string]int64) []checkResult {
	overlap := checkResult{Name: "lock holds overlapping (one key)", Checked: len(holds)}
	lost := checkResult{Name: "lock-protected counter lost updates", Checked: len(holds)}
	byKey := map[string][]lockHold{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	for _, key := range slices.Sorted(maps.Keys(counters)) {
		hs := byKey[key]
		slices.SortFunc(hs, func(a, b lockHold) int { return a.From.Compare(b.From) })
		for i := 1; i < len(hs); i++ {
			if hs[i].From.Before(hs[i-1].To) {
				overlap.violate("key %s: %s held it from %s while %s held it until %s", key, hs[i].Holder,
					hs[i].From.Format("15:04:05.000000"), hs[i-1].Holder, hs[i-1].To.Format("15:04:05.000000"))
			}
		}
		slices.SortFunc(hs, func(a, b lockHold) int { return cmp.Compare(a.N, b.N) })
		for i, h := range hs {
			if h.N != int64(i+1) {
				lost.violate("key %s: hold %d of %d stored counter %d (holder %s)", key, i+1, len(hs), h.N, h.Holder)
				break
			}
		}
		if counters[key] != int64(len(hs)) {
			lost.violate("key %s: counter is %d after %d holds", key, counters[key], len(hs))
		}
	}
	for key := range byKey {
		if _, ok := counters[key]; !ok {
			lost.violate("key %s: holds recorded but no counter", key)
		}
	}
	return []checkResult{overlap, lost}
}

// The checker itself is checked: evidence with known violations must
// produce exactly them, and clean evidence none.
func TestSoakCheckerFindsViolations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	slot := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	run := func(job string, s int, fence int64, worker string, start, end int) jobRun {
		r := jobRun{Job: job, Slot: slot(s), Fence: fence, Worker: worker, Instance: worker + "#1", Start: at(start), How: "ok"}
		if end >= 0 {
			r.End = at(end)
		} else {
			r.How = ""
		}
		return r
	}
	count := func(rs []checkResult) map[string]int {
		m := map[string]int{}
		for _, r := range rs {
			m[r.Name] = len(r.Violations)
		}
		return m
	}
	want := func(t *testing.T, rs []checkResult, wantN map[string]int) {
		t.Helper()
		got := count(rs)
		for _, r := range rs {
			if got[r.Name] != wantN[r.Name] {
				t.Errorf("%s: %d violations, want %d: %q", r.Name, got[r.Name], wantN[r.Name], r.Violations)
			}
		}
	}

	clean := jobEvidence{
		Runs: []jobRun{
			run("tick", 0, 1, "w1", 0, 200),
			run("tick", 1, 2, "w2", 1000, 1300),
			// w2 killed mid-run: no end line; the slot runs again elsewhere.
			run("tick", 2, 3, "w2", 2000, -1),
			run("tick", 2, 4, "w3", 3500, 3700),
			// w5 forked a command just before its kill at 2500; the command
			// wrote its start line as w5 was dying, and died with it.
			run("slow", 0, 1, "w5", 2520, -1),
			run("slow", 0, 2, "w6", 4000, 5000),
			// w3 paused past the lease: its command ran on, beside the re-run.
			run("tick", 3, 5, "w3", 4000, 6000),
			run("tick", 3, 6, "w1", 5500, 5600),
			// w1 reported the run lost (lease gone under load).
			run("tick", 4, 7, "w1", 7000, 7100),
			run("tick", 4, 8, "w4", 8500, 8600),
			run("lead", 0, 1, "w1", 0, 10),
			run("lead", 1, 1, "w1", 1000, 1010),
		},
		Faults: []soakFault{
			{Kind: "sigkill", Target: "w2", Start: at(2100), End: at(2100)},
			{Kind: "sigkill", Target: "w5", Start: at(2500), End: at(2500)},
			{Kind: "sigstop", Target: "w3", Start: at(4100), End: at(6500)},
		},
		Excused:  map[runKey]string{{"tick", slot(4).UnixMicro(), 7}: "job_lost"},
		KilledAt: map[string]time.Time{"w2": at(2100), "w5": at(2500)},
		CatchUp:  map[string]time.Duration{"tick": time.Second},
		Leader:   map[string]bool{"lead": true},
	}
	t.Run("clean jobs", func(t *testing.T) { want(t, checkJobs(clean), nil) })

	bad := clean
	bad.Runs = append(slices.Clone(clean.Runs),
		// Slot 6 twice, no fault on w1, nothing reported: twice; and the
		// second starts while the first runs: overlap.
		run("tick", 6, 9, "w1", 10000, 10400),
		run("tick", 6, 10, "w2", 10300, 10350),
		// Fence 10 again on another worker: a token with two owners.
		run("tick", 7, 10, "w4", 11000, 11100),
		// Slot 5 missing (between 4 and 6): missed. Slot 8 never ends.
		run("tick", 8, 11, "w4", 12000, -1),
		// Same slot, same fence, twice.
		run("lead", 2, 1, "w1", 2000, 2010),
		run("lead", 2, 1, "w1", 2500, 2510),
	)
	t.Run("broken jobs", func(t *testing.T) {
		want(t, checkJobs(bad), map[string]int{
			"job runs overlapping (both owners live)":           1,
			"job slot run twice by live owners":                 1,
			"job fencing token reused (two owners or one slot)": 2,
			"catch-up job slots missed":                         1,
			"job runs never ended (worker not killed)":          1,
		})
	})

	t.Run("leaders", func(t *testing.T) {
		good := []leaderWrite{{1, 1, "c1#a"}, {2, 1, "c1#a"}, {3, 2, "c2#b"}, {4, 4, "c1#c"}}
		want(t, checkLeaders(good), nil)
		broken := []leaderWrite{{1, 1, "c1#a"}, {2, 2, "c2#b"}, {3, 1, "c1#a"}, {4, 2, "c3#c"}, {6, 3, "c3#c"}}
		want(t, checkLeaders(broken), map[string]int{
			"leader writes out of token order": 1,
			"leader token with two owners":     1,
			"leader write sequence broken":     1,
		})
	})

	t.Run("locks", func(t *testing.T) {
		good := []lockHold{{"k", "a", 1, at(0), at(10)}, {"k", "b", 2, at(10), at(20)}, {"j", "a", 1, at(5), at(50)}}
		want(t, checkLocks(good, map[string]int64{"k": 2, "j": 1}), nil)
		broken := []lockHold{{"k", "a", 1, at(0), at(10)}, {"k", "b", 1, at(5), at(20)}, {"j", "a", 1, at(5), at(50)}}
		want(t, checkLocks(broken, map[string]int64{"k": 1, "j": 2}), map[string]int{
			"lock holds overlapping (one key)":    1,
			"lock-protected counter lost updates": 3, // k stored 1 twice; k's counter 1 after 2 holds; j's counter 2 after 1 hold
		})
	})
}
