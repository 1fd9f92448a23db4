package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/seed"
)

// cli runs a worker subcommand against dsn and returns its output and
// error.
func cli(dsn string, args ...string) (string, error) {
	cmd := exec.Command(workerBin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Everything but migrate through PgBouncer in transaction pooling mode:
// load, several workers (one SIGKILLed mid-run, one listening on a direct
// connection, the others polling), status, retry and export. Every record
// is priced exactly once.
func TestThroughPgBouncerTransactionPooling(t *testing.T) {
	r := newRun(t, scenarioSeed(t))
	pooled := pgtest.Bouncer(t, r.dsn)

	// migrate refuses a pooler, saying what to do.
	if out, err := cli(pooled, "migrate"); err == nil || !strings.Contains(out, "direct connection") {
		t.Fatalf("migrate through the pooler: %v\n%s", err, out)
	}

	contracts, per := size()
	o := seed.Options{Contracts: contracts, RecordsPerContract: per, Seed: r.rng.Uint64(), Prefix: "f"}
	r.tiers = filepath.Join(r.dir, "tiers.csv")
	records := filepath.Join(r.dir, "records-1.csv")
	write(t, r.tiers, func(w io.Writer) error { return seed.WriteTiers(w, o) })
	write(t, records, func(w io.Writer) error { return seed.WriteRecords(w, o, nil) })
	if out, err := cli(pooled, "load", "--tiers", r.tiers, "--records", records); err != nil {
		t.Fatalf("load through the pooler: %v\n%s", err, out)
	}
	r.inputs = append(r.inputs, records)

	// One contract is quarantined, to be retried through the pooler.
	var poisoned string
	if err := r.db.QueryRow(`UPDATE baton.tasks SET failed_at = now(), attempts = 5, last_error = 'test',
		lease_expires_at = 'infinity', version = version + 1
		WHERE partition_key = (SELECT min(partition_key) FROM baton.tasks) RETURNING partition_key`).Scan(&poisoned); err != nil {
		t.Fatal(err)
	}

	listener := r.start(pooled, "--listen-database-url", r.dsn)
	for range 2 {
		r.start(pooled)
	}
	// status through the pooler shows how each worker learns of new work.
	testutil.Eventually(t, 30*time.Second, "status listing the 3 workers", func() error {
		out, err := cli(pooled, "status", "--json")
		if err != nil {
			t.Fatalf("status through the pooler: %v\n%s", err, out)
		}
		var st struct {
			Workers []struct {
				Name string `json:"name"`
				Wake string `json:"wake"`
			} `json:"workers"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if len(st.Workers) == 3 {
			for _, w := range st.Workers {
				want := "poll"
				if w.Name == listener.name {
					want = "listen"
				}
				if w.Wake != want {
					t.Fatalf("worker %s wakes by %q, want %q", w.Name, w.Wake, want)
				}
			}
			return nil
		}
		return fmt.Errorf("status lists %d workers:\n%s", len(st.Workers), out)
	})
	if out, err := cli(pooled, "retry", poisoned); err != nil || !strings.Contains(out, "re-enabled") {
		t.Fatalf("retry through the pooler: %v\n%s", err, out)
	}

	r.waitProgress(0.4)
	w := r.victim()
	held := r.heldBy(w.name)
	at := r.dbNow()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.killed = true
	r.stats.fault("sigkill")
	r.start(pooled)
	r.waitAll(3 * time.Minute)
	r.takeovers([]orphan{{worker: w.name, at: at, contracts: held}})

	out := filepath.Join(r.dir, "priced.csv")
	if msg, err := cli(pooled, "export", "--out", out); err != nil {
		t.Fatalf("export through the pooler: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := r.expected()
	lines := strings.Split(strings.TrimRight(string(got), "\n"), "\n")[1:]
	if len(lines) != len(want) {
		t.Fatalf("exported %d priced records through the pooler, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("line %d: got %s, want %s", i+2, lines[i], want[i])
		}
	}
	r.check()
}
