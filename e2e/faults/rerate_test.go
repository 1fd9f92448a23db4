package faults

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/pricing/seed"
)

// Re-rating while the workers run and fail: a tier change re-prices a
// third of the contracts (worker load --tiers --reprice), amendments
// correct records of others (worker load --records --amend), a plain
// re-pricing names two more (worker reprice), new records keep arriving,
// and a worker is SIGKILLed and another SIGSTOPped past its lease in the
// middle. At the end every record of the current generation equals an
// independent recomputation under the current tiers and amounts, and each
// re-priced contract's previous generation is what the old tiers and
// amounts gave, untouched.
func TestRepricingUnderFaults(t *testing.T) {
	r := newRun(t, scenarioSeed(t))
	contracts, per := size()
	r.seedData(contracts, per)
	// The previous generation, as the first tiers and amounts price it.
	before := r.expectedByContract()
	for range 3 {
		r.start(r.dsn)
	}
	r.waitProgress(0.3 + 0.2*r.rng.Float64())

	ids := make([]string, contracts)
	for i := range ids {
		ids[i] = seed.Options{Prefix: "f"}.ContractID(i)
	}
	r.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	third := max(1, contracts/3)
	retiered, amended, named := ids[:third], ids[third:2*third], ids[2*third:2*third+2]

	// 1. New tiers for a third of the contracts, re-priced from the start.
	tiers := filepath.Join(r.dir, "tiers-2.csv")
	write(t, tiers, func(w io.Writer) error {
		fmt.Fprintln(w, "contract_id,threshold_minor,discount_bp")
		for _, c := range retiered {
			fmt.Fprintf(w, "%s,0,%d\n%s,%d,%d\n", c, r.rng.IntN(300), c, 1+r.rng.IntN(200_000), 300+r.rng.IntN(2000))
		}
		return nil
	})
	r.cli("load", "--tiers", tiers, "--reprice", "--reason", "tiers corrected")
	r.tierUpdates = append(r.tierUpdates, tiers)

	// A worker killed mid-batch, replaced.
	w := r.victim()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.killed = true
	r.stats.fault("sigkill")
	r.start(r.dsn)

	// 2. Amendments: a few records of other contracts get new amounts,
	// beside records that are new.
	amends := filepath.Join(r.dir, "records-amend.csv")
	r.writeAmendments(amends, amended, 3)
	r.cli("load", "--records", amends, "--amend", "--reason", "meter corrected")
	r.inputs = append(r.inputs, amends)
	r.amendFiles = append(r.amendFiles, amends)

	// A worker paused past its lease, then resumed.
	w = r.victim()
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	w.stopped = true
	r.stats.fault("sigstop")
	time.Sleep(2 * time.Second) // the fault itself: a pause longer than the 1s lease
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	w.stopped = false

	// 3. A plain re-pricing, and new records for every contract.
	r.cli(append([]string{"reprice", "--reason", "audit"}, named...)...)
	more := filepath.Join(r.dir, "records-2.csv")
	o := seed.Options{Contracts: contracts, RecordsPerContract: per / 4, Seed: r.rng.Uint64(), Prefix: "f"}
	f, err := os.Create(more)
	if err == nil {
		err = writeRecordRange(f, o, func(c, j int) bool { return true }, "more-")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	r.cli("load", "--records", more)
	r.inputs = append(r.inputs, more)
	for range 2 {
		r.start(r.dsn)
	}
	r.waitAll(3 * time.Minute)
	r.check()

	// Each re-priced contract's previous generation is the old pricing
	// of the records it had priced by then: a prefix of what the first
	// tiers and amounts give, in order, nothing changed.
	prev := r.exportGeneration("previous")
	for _, c := range slices.Concat(retiered, amended, named) {
		got, want := prev[c], before[c]
		if len(got) == 0 {
			t.Errorf("contract %s: no previous generation exported", c)
			continue
		}
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Errorf("contract %s: previous generation (%d records) is not the old pricing's first %d records", c, len(got), len(got))
		}
	}
	gens := r.cli("generations")
	for _, c := range slices.Concat(retiered, amended, named) {
		if !strings.Contains(gens, c) {
			t.Errorf("worker generations does not list re-priced contract %s:\n%s", c, gens)
		}
	}
}

// cli runs the worker binary with args on the run's database, failing the
// test if it fails, and returns its standard output.
func (r *run) cli(args ...string) string {
	r.t.Helper()
	cmd := exec.Command(workerBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+r.dsn)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("worker %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// writeAmendments writes, for each contract, n of its loaded records with
// new amounts and one new record.
func (r *run) writeAmendments(path string, contracts []string, n int) {
	r.t.Helper()
	pick := map[string][]string{}
	for _, in := range r.inputs {
		readCSV(r.t, in, func(f []string) {
			if slices.Contains(contracts, f[0]) && len(pick[f[0]]) < 50 {
				pick[f[0]] = append(pick[f[0]], f[1])
			}
		})
	}
	write(r.t, path, func(w io.Writer) error {
		fmt.Fprintln(w, "contract_id,record_id,amount_minor")
		for _, c := range contracts {
			ids := pick[c]
			for i := 0; i < n && len(ids) > 0; i++ {
				j := r.rng.IntN(len(ids))
				fmt.Fprintf(w, "%s,%s,%d\n", c, ids[j], 1+r.rng.IntN(90_000))
				ids = slices.Delete(ids, j, j+1)
			}
			fmt.Fprintf(w, "%s,amend-new-%s,%d\n", c, c, 1+r.rng.IntN(90_000))
		}
		return nil
	})
}

// exportGeneration exports a generation with the worker binary and returns
// its lines by contract.
func (r *run) exportGeneration(which string) map[string][]string {
	r.t.Helper()
	out := filepath.Join(r.dir, "export-"+which+".csv")
	r.cli("export", "--generation", which, "--out", out)
	b, err := os.ReadFile(out)
	if err != nil {
		r.t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")[1:]
	by := map[string][]string{}
	for _, l := range lines {
		c, _, _ := strings.Cut(l, ",")
		by[c] = append(by[c], l)
	}
	return by
}

// expectedByContract is expected's lines by contract.
func (r *run) expectedByContract() map[string][]string {
	by := map[string][]string{}
	for _, l := range r.expected() {
		c, _, _ := strings.Cut(l, ",")
		by[c] = append(by[c], l)
	}
	return by
}
