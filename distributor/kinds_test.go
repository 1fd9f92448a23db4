package distributor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/partition"
)

// kindProc is a processor of one kind: it writes one output row per item,
// keyed (kind, key, n), and records any batch it is handed of another kind.
type kindProc struct {
	kind  string
	mu    sync.Mutex
	alien []string
}

func (p *kindProc) Kind() string { return p.kind }

func (p *kindProc) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	if b.Kind != p.kind {
		p.mu.Lock()
		p.alien = append(p.alien, fmt.Sprintf("%s/%s@%d", b.Kind, b.Lease.Key, b.Checkpoint.Position))
		p.mu.Unlock()
	}
	end := min(b.Checkpoint.Position+int64(b.Limit), b.Checkpoint.Available)
	if _, err := b.Tx.ExecContext(ctx, `
		INSERT INTO kind_output (kind, key, n, owner)
		SELECT ?, ?, n, ? FROM generate_series(?::bigint, ?::bigint) n`,
		p.kind, b.Lease.Key, b.Owner, b.Checkpoint.Position+1, end); err != nil {
		return distributor.Result{}, err
	}
	return distributor.Result{Position: end}, nil
}

// Two processors of different kinds share one schema, with partitions of
// the same names, their workers running at once: each worker claims and
// processes only its own kind's partitions, every item of each kind is
// processed exactly once by a worker of that kind, each kind's checkpoints
// move only for its own items, and each kind's until-done workers finish
// on their own kind's work. Without kinds the two processors' items were
// added to the same rows and their checkpoints moved past each other's
// items.
//
// Not parallel: its four workers would compete for a small machine with
// the timing-sensitive tests that run in parallel; it runs alone, before
// them.
func TestProcessorsOfTwoKindsShareASchema(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.db.Exec(`CREATE TABLE kind_output (
		kind text NOT NULL, key text NOT NULL, n bigint NOT NULL, owner text NOT NULL,
		PRIMARY KEY (kind, key, n))`); err != nil {
		t.Fatal(err)
	}
	shared := keys("k", 12)
	work := map[string]map[string]int64{"alpha": {}, "beta": {}}
	for i, k := range shared {
		work["alpha"][k] = int64(15 + i)
		work["beta"][k] = int64(1 + i%4)
	}
	for _, k := range keys("b", 5) {
		work["beta"][k] = 9
	}
	for kind, w := range work {
		var ws []partition.Work
		for k, n := range w {
			ws = append(ws, partition.Work{Key: k, N: n})
		}
		if _, err := partition.NewStore(e.db, "").Kind(kind).AddWorks(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	procs := map[string]*kindProc{"alpha": {kind: "alpha"}, "beta": {kind: "beta"}}
	owners := map[string]string{} // instance → kind
	var ds []*distributor.Distributor
	for i := range 4 {
		kind := []string{"alpha", "beta"}[i%2]
		ev := newEvents()
		cfg := fastConfig(fmt.Sprintf("%s-%d", kind, i), ev)
		cfg.UntilDone, cfg.MaxPartitions, cfg.ClaimGroup = true, 4, 3
		if i < 2 {
			cfg.Kind = kind // the others take it from the processor
		}
		d := e.start(cfg, procs[kind])
		owners[d.InstanceID()] = kind
		ds = append(ds, d)
	}
	for _, d := range ds {
		if err := waitDone(t, d, 60*time.Second); err != nil {
			t.Fatalf("worker %s: %v", d.InstanceID(), err)
		}
	}
	for kind, p := range procs {
		if len(p.alien) > 0 {
			t.Errorf("the %s processor was handed batches of other kinds: %v", kind, p.alien)
		}
	}

	// Each kind's partitions: checkpoint at its own available, every item
	// output once, by a worker of its kind.
	rows, err := e.db.Query(`
		SELECT t.kind, t.partition_key, t.available, t.position, count(o.n), coalesce(min(o.n), 0), coalesce(max(o.n), 0),
		       coalesce(string_agg(DISTINCT o.owner, ','), '')
		FROM baton.tasks t LEFT JOIN kind_output o ON o.kind = t.kind AND o.key = t.partition_key
		GROUP BY t.kind, t.partition_key, t.available, t.position`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := 0
	for rows.Next() {
		var kind, key, outOwners string
		var avail, pos, cnt, lo, hi int64
		if err := rows.Scan(&kind, &key, &avail, &pos, &cnt, &lo, &hi, &outOwners); err != nil {
			t.Fatal(err)
		}
		seen++
		if want := work[kind][key]; avail != want {
			t.Errorf("%s/%s: available %d, want %d (its own producer's only)", kind, key, avail, want)
		}
		if pos != avail || cnt != avail || lo != 1 || hi != avail {
			t.Errorf("%s/%s: available %d, position %d, %d outputs spanning %d..%d", kind, key, avail, pos, cnt, lo, hi)
		}
		for _, o := range strings.Split(outOwners, ",") {
			if owners[o] != kind {
				t.Errorf("%s/%s: output written by %s, a worker of kind %q", kind, key, o, owners[o])
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := len(work["alpha"]) + len(work["beta"]); seen != want {
		t.Errorf("%d task rows, want %d", seen, want)
	}
	// The history agrees: every event of a kind's partition names a
	// worker of that kind.
	var bad []string
	evRows, err := e.db.Query(`SELECT task_kind, partition_key, kind, coalesce(worker, '') FROM baton.events`)
	if err != nil {
		t.Fatal(err)
	}
	defer evRows.Close()
	for evRows.Next() {
		var tk, key, ek, worker string
		if err := evRows.Scan(&tk, &key, &ek, &worker); err != nil {
			t.Fatal(err)
		}
		if owners[worker] != tk {
			bad = append(bad, fmt.Sprintf("%s %s/%s by %s", ek, tk, key, worker))
		}
	}
	if len(bad) > 0 {
		t.Errorf("events of one kind's partitions by workers of another: %v", bad)
	}
}

// A processor of a kind refuses a Config.Kind that differs; a Kind must be
// a valid kind.
func TestConfigKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := distributor.New(e.db, &kindProc{kind: "alpha"}, distributor.Config{Kind: "beta"}); err == nil ||
		!strings.Contains(err.Error(), `"alpha"`) {
		t.Errorf("New with Kind beta for an alpha processor = %v, want refused", err)
	}
	for _, k := range []string{"two words", "a/b", strings.Repeat("k", partition.MaxKindLen+1)} {
		if err := (distributor.Config{Kind: k}).Validate(); err == nil {
			t.Errorf("Config{Kind: %q}.Validate() = nil, want an error", k)
		}
	}
	if err := (distributor.Config{}).Validate(); err != nil {
		t.Errorf("Config{}.Validate() = %v; the kind defaults to %q", err, partition.DefaultKind)
	}
}
