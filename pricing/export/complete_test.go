package export_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/ingest"
	"github.com/batonhq/baton/pricing/pricer"
)

// WriteComplete writes nothing while a record is unpriced or a contract's
// checkpoint lies beyond its records, and fails when the priced rows are
// not those the checkpoints cover; partitions of other kinds named like a
// contract change nothing.
func TestWriteComplete(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	loadCSV(t, db, "contract_id,threshold_minor,discount_bp\na,0,0\nb,0,0\n", "contract_id,record_id,amount_minor\na,r1,10\na,r2,20\nb,r1,5\n")
	// Another kind's partition named like a contract, with work of its own.
	if _, err := partition.NewStore(db, "").Kind("orders").AddWork(ctx, "a", 7); err != nil {
		t.Fatal(err)
	}
	write := func() (int64, string, error) {
		var buf bytes.Buffer
		n, err := export.NewStore(db, "").WriteComplete(ctx, &buf)
		return n, buf.String(), err
	}
	// Nothing priced.
	n, out, err := write()
	var inc *export.IncompleteError
	if !errors.As(err, &inc) || inc.Progress.Unpriced != 3 || len(inc.Progress.Inconsistent) != 0 || out != "" || n != 0 {
		t.Fatalf("unpriced: %d rows, %v, %q; want an IncompleteError with 3 unpriced, nothing written", n, err, out)
	}
	price := func(contract string, seq int64, gross int64) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `INSERT INTO baton.priced
			(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
			VALUES (?, ?, 'r' || ?::text, ?, 0, ?, 1, 'test')`, contract, seq, seq, gross, gross); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(contract string, position int64) {
		t.Helper()
		if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET position = ? WHERE kind = ? AND partition_key = ?`,
			position, pricer.Kind, contract); err != nil {
			t.Fatal(err)
		}
	}
	price("a", 1, 10)
	price("a", 2, 20)
	price("b", 1, 5)
	checkpoint("a", 2)
	checkpoint("b", 1)
	if n, out, err := write(); err != nil || n != 3 || !strings.HasPrefix(out, export.Header+"\n") {
		t.Fatalf("complete: %d rows, %v\n%s", n, err, out)
	}
	// Split into segments, one of which has not priced its record yet
	// (the contract's row is past it, as a split leaves it): refused,
	// nothing written, and a segment row is no contract.
	if _, err := db.ExecContext(ctx, `DELETE FROM baton.priced WHERE contract_id = 'a' AND seq = 2`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO baton.tasks (kind, partition_key, segment_of, generation, position, available)
		VALUES (?, ?, 'a', 1, 1, 2)`, pricer.Kind, partition.SegmentKey("a", 1)); err != nil {
		t.Fatal(err)
	}
	n, out, err = write()
	if !errors.As(err, &inc) || inc.Progress.Unpriced != 1 || inc.Progress.Priced != 2 || inc.Progress.Contracts != 2 ||
		len(inc.Progress.Inconsistent) != 0 || out != "" || n != 0 {
		t.Fatalf("a segment's record unpriced: %d rows, %v, %q; want an IncompleteError with 1 unpriced, nothing written", n, err, out)
	}
	price("a", 2, 20)
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET position = 2 WHERE kind = ? AND segment_of = 'a'`, pricer.Kind); err != nil {
		t.Fatal(err)
	}
	if n, _, err := write(); err != nil || n != 3 {
		t.Fatalf("the segment caught up: %d rows, %v", n, err)
	}
	// A checkpoint beyond the records: refused, nothing written.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET available = 3 WHERE kind = ? AND partition_key = 'b'`, pricer.Kind); err != nil {
		t.Fatal(err)
	}
	checkpoint("b", 3)
	n, out, err = write()
	if !errors.As(err, &inc) || len(inc.Progress.Inconsistent) != 1 || inc.Progress.Inconsistent[0].ContractID != "b" ||
		!strings.Contains(err.Error(), "checkpoint 3 is beyond the contract's 1 records") || out != "" || n != 0 {
		t.Fatalf("checkpoint beyond the records: %d rows, %v, %q; want b inconsistent, nothing written", n, err, out)
	}
	// Within the records, but a record the checkpoint covers was never
	// priced: the exported rows fall short of the checkpoints.
	if _, err := db.ExecContext(ctx, `UPDATE baton.tasks SET available = 1, position = 1 WHERE kind = ? AND partition_key = 'b'`, pricer.Kind); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM baton.priced WHERE contract_id = 'a' AND seq = 2`); err != nil {
		t.Fatal(err)
	}
	if n, _, err := write(); !errors.Is(err, export.ErrIncomplete) || n != 2 {
		t.Fatalf("a priced row missing: %d rows, %v; want ErrIncomplete after 2 rows", n, err)
	}
}

// loadCSV loads the tiers and records CSV texts given into db.
func loadCSV(t *testing.T, db *dbconn.DB, tiers, records string) {
	t.Helper()
	dir := t.TempDir()
	tp, rp := filepath.Join(dir, "tiers.csv"), filepath.Join(dir, "records.csv")
	for path, text := range map[string]string{tp: tiers, rp: records} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ingest.NewStore(db, "").Load(context.Background(), ingest.Options{TiersPath: tp, RecordsPath: rp}); err != nil {
		t.Fatal(err)
	}
}
