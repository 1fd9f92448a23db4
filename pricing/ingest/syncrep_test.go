package ingest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pglocal"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/internal/testutil"
	"github.com/batonhq/baton/pricing/pricingschema"
	"github.com/batonhq/baton/schema"
)

const syncRecords = "contract_id,record_id,amount_minor\nc-1,r-1,100\nc-1,r-2,250\n"

// The test server runs with synchronous_commit off: a load asked to
// confirm its standby commits and says it is unconfirmed; without the
// option it succeeds as before.
func TestConfirmStandbyWithoutSynchronousReplication(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	db := pgtest.Open(t, url, dbconn.Options{})
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	state, err := readSyncState(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if state.waits {
		t.Fatalf("the test server waits for a synchronous standby; this test needs one that does not")
	}
	tiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nc-1,0,0\n")
	records := writeFile(t, "records.csv", syncRecords)

	rep, err := load(ctx, db, Options{TiersPath: tiers, RecordsPath: records, ConfirmStandby: true})
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || !errors.Is(err, dbconn.ErrNotReplicated) {
		t.Fatalf("load with ConfirmStandby on a server without a synchronous standby: %v, want a *NotReplicatedError", err)
	}
	if nr.LoadID != rep.LoadID || nr.Unsynchronized != state.why || !strings.Contains(err.Error(), state.why) {
		t.Fatalf("error %+v (%v) for load %d, want it to name load %d and %q", nr, err, rep.LoadID, rep.LoadID, state.why)
	}
	if got := tableCounts(t, db); got.Records != 2 {
		t.Fatalf("%d records stored, want the load committed with 2", got.Records)
	}

	records2 := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nc-1,r-3,100\n")
	if _, err := load(ctx, db, Options{RecordsPath: records2}); err != nil {
		t.Fatalf("load without ConfirmStandby: %v", err)
	}
}

// A load that begins while commits wait for a synchronous standby and
// commits after replication is turned off (an HA manager's wait_primary)
// is reported as unconfirmed: no warning comes from the server, since its
// commit never waited or was released without one.
func TestLoadUnconfirmedWhenReplicationTurnsOffDuringIt(t *testing.T) {
	ctx := t.Context()
	base, err := os.MkdirTemp("", "baton-syncrep-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(base, "pg"), Settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(pglocal.Immediate) })
	admin, err := pgx.Connect(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE baton"); err != nil {
		t.Fatal(err)
	}
	handle := pgtest.OpenDB(t, srv.URL("baton"), dbconn.Options{MaxOpenConns: 2})
	if _, err := schema.Migrate(ctx, handle, schema.Config{Sets: []*schema.Set{schema.Core, pricingschema.Set}}); err != nil {
		t.Fatal(err)
	}
	setStandbys := func(names string) {
		t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '%s'", names)); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
	}
	// No standby exists: from here until it is emptied again, a commit
	// waits. The reload reaches new sessions once the postmaster has read
	// it, which nothing signals: poll with new sessions.
	setStandbys("*")
	testutil.Eventually(t, time.Minute, "new sessions waiting for a synchronous standby", func() error {
		c, err := pgx.Connect(ctx, srv.URL("baton"))
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		s, err := readSyncState(ctx, c)
		if err == nil && !s.waits {
			err = errors.New(s.why)
		}
		return err
	})

	tiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nc-1,0,0\n")
	records := writeFile(t, "records.csv", syncRecords)
	turnedOff := false
	rep, err := load(ctx, handle.DB, Options{TiersPath: tiers, RecordsPath: records, Progress: func(stage string, _ int64) {
		if stage == StageUpdating && !turnedOff {
			turnedOff = true
			setStandbys("")
		}
	}})
	if !turnedOff {
		t.Fatal("the load never reached its last stage")
	}
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || nr.Unsynchronized != "synchronous_standby_names is empty" || nr.LoadID != rep.LoadID {
		t.Fatalf("load committed after replication was turned off: %v (%+v), want a *NotReplicatedError naming synchronous_standby_names", err, nr)
	}
	var stored int64
	if err := handle.DB.QueryRowContext(ctx, "SELECT count(*) FROM baton.records").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 2 {
		t.Fatalf("%d records stored, want the load committed with 2", stored)
	}
	// Replication off as the load begins: nothing to confirm, unless asked.
	records2 := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nc-1,r-3,100\n")
	if _, err := load(ctx, handle.DB, Options{RecordsPath: records2}); err != nil {
		t.Fatalf("load with replication off throughout: %v", err)
	}
}
