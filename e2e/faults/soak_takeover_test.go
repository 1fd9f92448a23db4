package faults

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/partition"
)

// soakTakeover is the takeover of one contract a SIGKILLed worker held
// with records left, read from the events table, and what happened on it
// in between: what the soak's slowest takeovers are attributed to.
type soakTakeover struct {
	contract string
	killed   string        // the killed process
	at       time.Time     // the kill
	wait     time.Duration // kill → first batch by another process
	claim    time.Duration // kill → first claim by another process
	// lostBy are the processes that claimed the contract after the kill
	// and lost it before a batch, with the faults they were dealt then.
	lostBy   []string
	restarts int           // database restarts begun in the wait
	down     time.Duration // their downtime
	rewinds  int           // re-ratings that rewound the contract in the wait
	// priced is kill → the first row another process priced that is
	// still stored (the measure before the events'), -1 if none is.
	priced time.Duration
}

// takeovers measures, for every contract a SIGKILLed worker held with
// records left, the time from the kill to the first batch another process
// committed on it: the "first_batch" event its claim's first batch
// records in the batch's own transaction. The process that replaces the
// killed one runs under the same name and counts as another (a new
// instance). An earlier version of this measure took the first priced row
// after the kill, in whichever generation's rows; but a
// re-rating that comes while a generation is still being priced abandons
// it and deletes its pending rows, so that a first batch re-rated away was
// not found and the takeover was timed by a batch minutes later: most of
// the tail of minutes it reported (a re-rated contract rewound to its
// start takes minutes to price again, and is re-rated again meanwhile).
func (s *soak) takeovers() []soakTakeover {
	var out []soakTakeover
	for _, o := range s.orphans {
		for _, c := range o.contracts {
			if tk, ok := s.takeover(o, c); ok {
				out = append(out, tk)
			}
		}
	}
	return out
}

// takeover reads the events of contract c after o's kill up to the first
// batch by another process; false if there is none.
func (s *soak) takeover(o orphan, c string) (soakTakeover, bool) {
	rows, err := s.r.db.Query(`SELECT at, kind, coalesce(worker, '') FROM baton.events
		WHERE partition_key = ? AND at > ? AND kind IN ('claimed', 'takeover', 'first_batch', 'rewound')
		ORDER BY at, event_id`, c, o.at)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	tk := soakTakeover{contract: c, killed: o.worker, at: o.at, claim: -1}
	var claimed []string // instances that claimed it, in order
	var at time.Time
	var kind, worker string
	for rows.Next() {
		if err := rows.Scan(&at, &kind, &worker); err != nil {
			s.t.Fatal(err)
		}
		other := worker != "" && worker != o.instance
		if o.instance == "" { // unknown: any instance of another name
			other = worker != "" && !strings.HasPrefix(worker, o.worker+"#")
		}
		switch {
		case kind == "rewound":
			tk.rewinds++
		case kind == "first_batch" && other:
			tk.wait = at.Sub(o.at)
			for _, w := range claimed {
				if w != worker && !slices.Contains(tk.lostBy, w) {
					tk.lostBy = append(tk.lostBy, w)
				}
			}
			s.attribute(&tk)
			tk.priced = s.firstPriced(o, c)
			return tk, true
		case other:
			if tk.claim < 0 {
				tk.claim = at.Sub(o.at)
			}
			claimed = append(claimed, worker)
		}
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return tk, false
}

// firstPriced is the time from o's kill to the first row of contract c
// another process priced that is still stored, in whichever generation
// (priced_rows keeps every generation's rows until they are pruned);
// -1 if there is none (pruned, or re-rated away).
func (s *soak) firstPriced(o orphan, c string) time.Duration {
	var first *time.Time
	if err := s.r.db.QueryRow(`SELECT min(priced_at) FROM baton.priced_rows
		WHERE contract_id = ? AND priced_at > ? AND priced_by <> ?`, partition.PartitionOf(c), o.at, o.instance).Scan(&first); err != nil {
		s.t.Fatal(err)
	}
	if first == nil {
		return -1
	}
	return first.Sub(o.at)
}

// attribute adds the database restarts begun in the takeover's wait and
// the faults dealt to the processes that lost the contract in it.
func (s *soak) attribute(tk *soakTakeover) {
	end := tk.at.Add(tk.wait)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range tk.lostBy {
		name, _, _ := strings.Cut(w, "#")
		var kinds []string
		for _, f := range s.faults {
			if f.Target == name && !f.Start.Before(tk.at) && f.Start.Before(end) {
				kinds = append(kinds, f.Kind)
			}
		}
		if len(kinds) == 0 {
			kinds = []string{"no fault"}
		}
		tk.lostBy[i] = name + " (" + strings.Join(kinds, ", ") + ")"
	}
	for _, f := range s.faults {
		if f.Target == "" && strings.HasPrefix(f.Kind, "db_restart") && !f.Start.Before(tk.at) && f.Start.Before(end) {
			tk.restarts++
			tk.down += f.End.Sub(f.Start)
		}
	}
}

// The causes a slow takeover is attributed to.
const (
	causeLost     = "lost before a batch"
	causeRestart  = "database restarts"
	causeRewind   = "re-rating rewinds"
	causeUnclaim  = "unclaimed for most of the wait"
	causeNoneSeen = "none of these"
)

// causes names what lengthened a takeover, each with its detail.
func (tk soakTakeover) causes() (names, details []string) {
	add := func(name, detail string) { names, details = append(names, name), append(details, detail) }
	if len(tk.lostBy) > 0 {
		add(causeLost, fmt.Sprintf("%s by %s", causeLost, strings.Join(tk.lostBy, "; ")))
	}
	if tk.restarts > 0 {
		add(causeRestart, fmt.Sprintf("%d database restart(s), %s down", tk.restarts, tk.down.Round(100*time.Millisecond)))
	}
	if tk.rewinds > 0 {
		add(causeRewind, fmt.Sprintf("%d re-rating rewind(s)", tk.rewinds))
	}
	if tk.claim < 0 || tk.claim > tk.wait/2 {
		add(causeUnclaim, fmt.Sprintf("unclaimed for %s", max(tk.claim, 0).Round(100*time.Millisecond)))
	}
	if len(names) == 0 {
		add(causeNoneSeen, "no restart, rewind or lost holder")
	}
	return names, details
}

// slowTakeover is the wait from which a takeover's causes are tallied.
const slowTakeover = 10 * time.Second

// takeoverReport is the report's takeover lines: the figures, how many
// slow takeovers each cause came with, and the slowest with their causes.
func takeoverReport(tks []soakTakeover) string {
	if len(tks) == 0 {
		return ""
	}
	waits := make([]time.Duration, len(tks))
	for i, tk := range tks {
		waits[i] = tk.wait
	}
	var b strings.Builder
	fmt.Fprintf(&b, "takeover after SIGKILL (kill → first batch by another process, from the events table; %d contracts): p50 %s, p99 %s, max %s\n",
		len(tks), percentile(waits, 0.5).Round(time.Millisecond), percentile(waits, 0.99).Round(time.Millisecond), percentile(waits, 1).Round(time.Millisecond))
	var priced []time.Duration
	later := 0
	for _, tk := range tks {
		if tk.priced >= 0 {
			priced = append(priced, tk.priced)
		}
		if tk.priced < 0 || tk.priced > tk.wait+slowTakeover {
			later++
		}
	}
	if len(priced) > 0 {
		fmt.Fprintf(&b, "  by the first priced row still stored instead (the measure of earlier runs; a re-rating deletes the rows of a generation it abandons): p50 %s, p99 %s, max %s; for %d of the %d contracts it is none or %s later than the first batch\n",
			percentile(priced, 0.5).Round(time.Millisecond), percentile(priced, 0.99).Round(time.Millisecond), percentile(priced, 1).Round(time.Millisecond),
			later, len(tks), slowTakeover)
	}
	slices.SortFunc(tks, func(a, b soakTakeover) int { return int(b.wait - a.wait) })
	tally := map[string]int{}
	slow := 0
	for _, tk := range tks {
		if tk.wait < slowTakeover {
			break
		}
		slow++
		names, _ := tk.causes()
		for _, c := range names {
			tally[c]++
		}
	}
	if slow > 0 {
		keys := make([]string, 0, len(tally))
		for k := range tally {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int { return tally[b] - tally[a] })
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, tally[k])
		}
		fmt.Fprintf(&b, "  %d took longer than %s; causes seen in their wait (one may have several): %s\n", slow, slowTakeover, strings.Join(parts, ", "))
	}
	for _, tk := range tks[:min(10, slow)] {
		_, details := tk.causes()
		fmt.Fprintf(&b, "  %s after %s killed at %s: first claim %s, first batch %s; %s\n", tk.contract, tk.killed,
			tk.at.UTC().Format("15:04:05.000"), max(tk.claim, 0).Round(time.Millisecond), tk.wait.Round(time.Millisecond),
			strings.Join(details, "; "))
	}
	return b.String()
}

// The takeover lines name the slow takeovers' causes: the processes that
// lost the contract before a batch (with their faults), database
// restarts, rewinds and a long wait for any claim.
func TestSoakTakeoverReport(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	tks := []soakTakeover{
		{contract: "f-000001", killed: "w1", at: at, wait: 1200 * time.Millisecond, claim: time.Second, priced: 1200 * time.Millisecond},
		{contract: "f-000002", killed: "w1", at: at, wait: 3 * time.Minute, claim: 2 * time.Second,
			lostBy: []string{"w7 (sigstop)", "w9 (sigkill)"}, restarts: 2, down: 5 * time.Second, priced: -1},
		{contract: "f-000004", killed: "w2", at: at, wait: 40 * time.Second, claim: 35 * time.Second, rewinds: 3, priced: 5 * time.Minute},
		{contract: "f-000005", killed: "w2", at: at, wait: 12 * time.Second, claim: time.Second, priced: 12 * time.Second},
	}
	got := takeoverReport(tks)
	for _, want := range []string{
		"4 contracts): p50 12s, p99 3m0s, max 3m0s\n",
		"  by the first priced row still stored instead (the measure of earlier runs; a re-rating deletes the rows of a generation it abandons): p50 12s, p99 5m0s, max 5m0s; for 2 of the 4 contracts it is none or 10s later than the first batch\n",
		"3 took longer than 10s; causes seen in their wait (one may have several): ",
		"re-rating rewinds 1", "unclaimed for most of the wait 1", "lost before a batch 1", "database restarts 1", "none of these 1",
		"  f-000002 after w1 killed at 01:00:00.000: first claim 2s, first batch 3m0s; lost before a batch by w7 (sigstop); w9 (sigkill); 2 database restart(s), 5s down\n",
		"  f-000004 after w2 killed at 01:00:00.000: first claim 35s, first batch 40s; 3 re-rating rewind(s); unclaimed for 35s\n",
		"  f-000005 after w2 killed at 01:00:00.000: first claim 1s, first batch 12s; no restart, rewind or lost holder\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "f-000001") {
		t.Errorf("a fast takeover listed:\n%s", got)
	}
}
