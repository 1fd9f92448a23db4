package pricingschema_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/pricing/pricingschema"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/leader"
	"github.com/batonhq/baton/lock"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schedule"
	"github.com/batonhq/baton/schema"
)

// The documented roles are enough to load and price, and no more: the
// worker cannot touch the inputs, the loader cannot write output.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	pgtest.Server(t) // creating roles needs our own server, not a shared one
	dsn := pgtest.NewURL(t)
	admin := pgtest.Open(t, dsn, dbconn.Options{})
	ctx := context.Background()
	// Roles are cluster-wide: give this test's its own names.
	suffix := strings.ToLower(strings.TrimPrefix(dsn[strings.LastIndex(dsn, "/")+1:], "baton_test_"))
	suffix = suffix[:strings.Index(suffix, "?")]
	worker, loader := "baton_worker_"+suffix, "baton_loader_"+suffix
	sql := strings.NewReplacer("baton_worker", worker, "baton_loader", loader).Replace(schema.SQL("", pricingschema.RolesSQL))
	if _, err := admin.ExecContext(ctx, sql); err != nil {
		t.Fatalf("running roles.sql: %v", err)
	}
	t.Cleanup(func() {
		for _, r := range []string{worker, loader} {
			_, _ = admin.Exec(`DROP OWNED BY ` + r)
			_, _ = admin.Exec(`DROP ROLE ` + r)
		}
	})
	as := func(role string) string {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		return u.String()
	}
	ldb := pgtest.OpenDB(t, as(loader), dbconn.Options{})
	if _, err := ingest.NewStore(ldb, "").Load(ctx, ingest.Options{
		TiersPath: "../../testdata/vectors/tiers.csv", RecordsPath: "../../testdata/vectors/records.csv",
	}); err != nil {
		t.Fatalf("load as %s: %v", loader, err)
	}
	wdb := pgtest.OpenDB(t, as(worker), dbconn.Options{MaxOpenConns: 12})
	if err := schema.Check(ctx, wdb, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}); err != nil {
		t.Fatalf("schema check as %s: %v", worker, err)
	}
	d, err := distributor.New(wdb, pricer.NewStore(wdb, "").Processor(), distributor.Config{
		Name: "least", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, UntilDone: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(ctx); err != nil {
		t.Fatalf("pricing as %s: %v", worker, err)
	}
	sum, err := pricer.NewStore(wdb, "").Verify(ctx)
	if err != nil || len(sum.Mismatches) > 0 || sum.Priced != 3544 {
		t.Fatalf("verify as worker: %+v, %v", sum, err)
	}
	// Scheduled jobs, leader election and entity locks work as the worker.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	jctx, stopJobs := context.WithCancel(ctx)
	sched, err := schedule.New(wdb, schedule.Config{InstanceID: "least#1", Heartbeat: 100 * time.Millisecond,
		StaleAfter: time.Second, PollInterval: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan *schedule.Run, 1)
	if err := sched.Register(ctx, schedule.Job{Definition: schedule.Definition{Name: "least", Every: 100 * time.Millisecond},
		Run: func(ctx context.Context, r *schedule.Run) error {
			select {
			case ran <- r:
			default:
			}
			return nil
		}}); err != nil {
		t.Fatalf("adding a job as %s: %v", worker, err)
	}
	jobsDone := make(chan error, 1)
	go func() { jobsDone <- sched.Run(jctx) }()
	<-ran
	stopJobs()
	if err := <-jobsDone; err != nil {
		t.Fatalf("running jobs as %s: %v", worker, err)
	}
	if _, err := schedule.NewStore(wdb, "").List(ctx); err != nil {
		t.Fatalf("listing jobs as %s: %v", worker, err)
	}
	el, err := leader.New(wdb, leader.Config{InstanceID: "least#1", Heartbeat: 100 * time.Millisecond, StaleAfter: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := el.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer el.Stop()
	l, err := el.Campaign(ctx, "least")
	if err != nil {
		t.Fatalf("campaigning as %s: %v", worker, err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatalf("resigning as %s: %v", worker, err)
	}
	for _, m := range []lock.Method{lock.MethodRow, lock.MethodAdvisory} {
		if err := wdb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return lock.Acquire(ctx, tx, "Least:1", lock.Options{Method: m})
		}); err != nil {
			t.Fatalf("entity lock (%s) as %s: %v", m, worker, err)
		}
	}

	for role, stmts := range map[string][]string{
		worker: {`DELETE FROM baton.record_chunks`, `INSERT INTO baton.record_chunks VALUES ('x', 1, 1, 0, '{r}', '{1}')`, `UPDATE baton.tiers SET discount_bp = 0`, `UPDATE baton.priced SET net_minor = 0`, `UPDATE baton.record_chunks SET amounts = '{1}'`, `INSERT INTO baton.contracts VALUES ('x')`,
			`UPDATE baton.tasks SET available = available + 1`},
		loader: {`INSERT INTO baton.priced (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by) VALUES ('x', 1, 'r', 1, 0, 1, 1, 'me')`, `DELETE FROM baton.record_chunks`, `UPDATE baton.record_chunks SET record_ids = '{r}'`, `UPDATE baton.priced SET net_minor = 0`, `UPDATE baton.tasks SET partition_key = 'x'`},
	} {
		db := wdb
		if role == loader {
			db = ldb
		}
		for _, stmt := range stmts {
			_, err := db.ExecContext(ctx, stmt)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
				t.Errorf("%s: %q = %v, want permission denied", role, stmt, err)
			}
		}
	}
}

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }
