package exampletest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// The embedding example's output, whatever database it runs in.
const embedOutput = `acme: 3 orders shipped, 1700 cents
globex: 1 orders shipped, 700 cents
initech: 2 orders shipped, 1400 cents
carrier requests: 3 distinct
`

// buildEmbed builds the embedding example.
func buildEmbed(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "embed")
	build := exec.Command("go", "build", "-o", bin, "./embed")
	build.Dir = examples
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example module: %v\n%s", err, out)
	}
	return bin
}

// runEmbed runs the example against dsn and checks its output.
func runEmbed(t *testing.T, bin, dsn string) error {
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running the example: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if stdout.String() != embedOutput {
		return fmt.Errorf("example output:\n%s\nwant:\n%s\nstderr:\n%s", stdout.String(), embedOutput, stderr.String())
	}
	return nil
}

// pricingRecords are the records loadPricing loads per contract: three of
// them named like the example's customers.
var pricingRecords = map[string]int{"acme": 1506, "globex": 997, "initech": 497, "c-1": 600, "c-2": 400}

// loadPricing loads tiers and records (4,000 in all) into the pricing
// database dsn, as "worker load" does.
func loadPricing(t *testing.T, dsn string) int64 {
	t.Helper()
	dir := t.TempDir()
	var tiers, records strings.Builder
	tiers.WriteString("contract_id,threshold_minor,discount_bp\n")
	records.WriteString("contract_id,record_id,amount_minor\n")
	var total int64
	for c, n := range pricingRecords {
		fmt.Fprintf(&tiers, "%s,0,0\n%s,50000,250\n", c, c)
		for i := range n {
			fmt.Fprintf(&records, "%s,r%d,%d\n", c, i, 100+i%37)
		}
		total += int64(n)
	}
	tp, rp := filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	for p, s := range map[string]string{tp: tiers.String(), rp: records.String()} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 2})
	rep, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{TiersPath: tp, RecordsPath: rp})
	if err != nil || rep.RecordsAccepted != total {
		t.Fatalf("loading: %+v, %v", rep, err)
	}
	return total
}

// runPricers runs n pricing workers on dsn until every record is priced.
func runPricers(ctx context.Context, t *testing.T, dsn string, n int) error {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		cfg := distributor.Config{
			Name: fmt.Sprintf("pricer-%d", i+1), Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second,
			BatchSize: 250, UntilDone: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: cfg.PoolSize()})
		d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), cfg)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.Run(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("pricing worker %d: %w", i+1, err)
		}
	}
	return ctx.Err()
}

// checkPriced checks that every one of the total records in dsn is priced
// exactly once, that every contract's checkpoint is at its last record,
// and that export --complete exports them all.
func checkPriced(t *testing.T, dsn string, total int64) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.OpenDB(t, dsn, dbconn.Options{MaxOpenConns: 2})
	sum, err := pricer.NewStore(db, "").Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != total || sum.Priced != total || len(sum.Mismatches) != 0 {
		t.Errorf("pricing: %d records, %d priced, mismatches %+v; want all %d priced exactly once", sum.Records, sum.Priced, sum.Mismatches, total)
	}
	// The contract's partition (whatever else shares its name): checkpoint
	// and available at its own records.
	for c, n := range pricingRecords {
		var found bool
		var got string
		if err := db.QueryRowContext(ctx, `
			SELECT bool_or(position = ? AND available = ?), string_agg(position || '/' || available, ' ')
			FROM baton.tasks WHERE partition_key = ?`, n, n, c).Scan(&found, &got); err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("contract %s: no task row with checkpoint and available at its %d records (position/available: %s)", c, n, got)
		}
	}
	var out bytes.Buffer
	if n, err := export.NewStore(db, "").WriteComplete(ctx, &out); err != nil || n != total {
		t.Errorf("export --complete: %d rows, %v; want %d", n, err, total)
	}
}

// The example runs beside two pricing workers in a pricing database, at
// the same time, its customers named like three of the contracts: it
// ships its orders, and every record is priced exactly once, every
// contract's checkpoint is at its own last record, and export --complete
// exports them all. Before partitions had kinds, the example added its
// orders to the contracts' partitions and moved their checkpoints past
// records it never priced (acme: checkpoint 1,509 of 1,506 records, 1,504
// priced; export --complete left 3 out).
func TestEmbedExampleBesidePricingWorkers(t *testing.T) {
	t.Parallel()
	bin := buildEmbed(t)
	dsn := pgtest.NewURL(t)
	total := loadPricing(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout(2*time.Minute))
	defer cancel()
	example := make(chan error, 1)
	go func() { example <- runEmbed(t, bin, dsn) }()
	if err := runPricers(ctx, t, dsn, 2); err != nil {
		t.Errorf("pricing: %v", err)
	}
	if err := <-example; err != nil {
		t.Error(err)
	}
	checkPriced(t, dsn, total)
}

// The example runs first in a freshly loaded pricing database, then two
// pricing workers price every record. Before partitions had kinds, the
// example's processor claimed the pricing partitions and advanced them,
// and the pricing workers then priced none of the 4,000 records.
func TestEmbedExampleBeforePricingWorkers(t *testing.T) {
	t.Parallel()
	bin := buildEmbed(t)
	dsn := pgtest.NewURL(t)
	total := loadPricing(t, dsn)
	if err := runEmbed(t, bin, dsn); err != nil {
		t.Error(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitTimeout(2*time.Minute))
	defer cancel()
	if err := runPricers(ctx, t, dsn, 2); err != nil {
		t.Errorf("pricing: %v", err)
	}
	checkPriced(t, dsn, total)
}
