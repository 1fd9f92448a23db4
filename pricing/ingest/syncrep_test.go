package ingest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/pricingschema"
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
	rep := pgtest.StartSyncRep(t, pricingschema.Set)
	db := pgtest.Open(t, rep.URL(), dbconn.Options{MaxOpenConns: 2})
	tiers := writeFile(t, "tiers.csv", "contract_id,threshold_minor,discount_bp\nc-1,0,0\n")
	records := writeFile(t, "records.csv", syncRecords)
	dropped := false
	loaded, err := load(ctx, db, Options{TiersPath: tiers, RecordsPath: records, Progress: func(stage string, _ int64) {
		if stage == StageUpdating && !dropped {
			dropped = true
			rep.DropStandbys(t)
		}
	}})
	if !dropped {
		t.Fatal("the load never reached its last stage")
	}
	var nr *NotReplicatedError
	if !errors.As(err, &nr) || nr.Unsynchronized != "synchronous_standby_names is empty" || nr.LoadID != loaded.LoadID {
		t.Fatalf("load committed after replication was turned off: %v (%+v), want a *NotReplicatedError naming synchronous_standby_names", err, nr)
	}
	var stored int64
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM baton.records").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 2 {
		t.Fatalf("%d records stored, want the load committed with 2", stored)
	}
	// Replication off as the load begins: nothing to confirm, unless asked.
	records2 := writeFile(t, "records.csv", "contract_id,record_id,amount_minor\nc-1,r-3,100\n")
	if _, err := load(ctx, db, Options{RecordsPath: records2}); err != nil {
		t.Fatalf("load with replication off throughout: %v", err)
	}
}
