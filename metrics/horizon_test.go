package metrics

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/horizon"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/pricingschema"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) } // the horizon test loads records

// gauges gathers m's gauges and counters by name and labels.
func gauges(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, l := range mt.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			if g := mt.GetGauge(); g != nil {
				got[key] = g.GetValue()
			}
			if c := mt.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
		}
	}
	return got
}

// A REPEATABLE READ transaction held in another session shows as the
// horizon's age, past the threshold as the warning gauge, and the schema's
// tables have their dead and live row gauges.
func TestHorizonGaugesReportAHeldTransaction(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewURL(t)
	db := pgtest.Open(t, dsn, dbconn.Options{})
	ctx := context.Background()
	holder := pgtest.Open(t, dsn, dbconn.Options{ApplicationName: "report", MaxOpenConns: 1})
	tx, err := holder.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT count(*) FROM baton.tasks"); err != nil {
		t.Fatal(err)
	}
	// A transaction id handed out after the snapshot puts its xmin behind.
	if _, err := db.ExecContext(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}
	var xactStart time.Time
	if err := tx.QueryRowContext(ctx, "SELECT xact_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&xactStart); err != nil {
		t.Fatal(err)
	}

	m := New()
	m.WatchHorizon(func(ctx context.Context) (horizon.Report, error) {
		return horizon.NewReader(pgtest.Handle(db), "baton").Read(ctx, time.Millisecond)
	})
	testutil.Eventually(t, 30*time.Second, "the horizon gauges", func() error {
		g := gauges(t, m)
		if g["baton_xmin_horizon_warning"] != 1 || g["baton_xmin_horizon_age_seconds"] <= 0 || g["baton_xmin_horizon_xids"] <= 0 {
			return fmt.Errorf("gauges: %v", g)
		}
		if g["baton_xmin_horizon_warn_after_seconds"] != 0.001 {
			return fmt.Errorf("threshold: %v", g["baton_xmin_horizon_warn_after_seconds"])
		}
		if _, ok := g["baton_table_dead_rows,table=tasks"]; !ok {
			return fmt.Errorf("no dead rows of tasks: %v", g)
		}
		if _, ok := g["baton_table_live_rows,table=record_chunks"]; !ok {
			return fmt.Errorf("no live rows of record_chunks: %v", g)
		}
		return nil
	})
	// The age is at least that of the held transaction (another test's
	// may be older).
	var held float64
	if err := db.QueryRowContext(ctx, "SELECT extract(epoch FROM now() - ?::timestamptz)::float8", xactStart).Scan(&held); err != nil {
		t.Fatal(err)
	}
	m2 := New()
	m2.WatchHorizon(func(ctx context.Context) (horizon.Report, error) {
		return horizon.NewReader(pgtest.Handle(db), "baton").Read(ctx, time.Millisecond)
	})
	if age := gauges(t, m2)["baton_xmin_horizon_age_seconds"]; age < held-0.5 {
		t.Fatalf("age %v below the held transaction's %v", age, held)
	}
}

// A reading that fails leaves the gauges out and counts the error.
func TestHorizonGaugesCountReadErrors(t *testing.T) {
	t.Parallel()
	m := New()
	m.WatchHorizon(func(context.Context) (horizon.Report, error) { return horizon.Report{}, fmt.Errorf("unreachable") })
	g := gauges(t, m)
	if g["baton_xmin_horizon_read_errors_total"] != 1 {
		t.Fatalf("errors: %v", g)
	}
	if _, ok := g["baton_xmin_horizon_age_seconds"]; ok {
		t.Fatal("age reported without a reading")
	}
}
