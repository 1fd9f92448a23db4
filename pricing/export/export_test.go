package export_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
	"github.com/batonhq/baton/pricing/export"
	"github.com/batonhq/baton/pricing/pricingschema"
)

func TestMain(m *testing.M) { pgtest.Main(m, pricingschema.Set) }

func insertPriced(t *testing.T, db *bun.DB, contract string, seq int64, recordID string, gross, discount int64) {
	t.Helper()
	_, err := db.ExecContext(context.Background(), `INSERT INTO baton.priced
		(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		VALUES (?, ?, ?, ?, ?, ?, 1, 'test')`, contract, seq, recordID, gross, discount, gross-discount)
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteExactBytes(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	// Inserted out of order; contract ids whose byte order differs from a
	// linguistic order ("B" < "Z-1" < "a" < "b.2" in bytes).
	insertPriced(t, db.DB, "a", 2, `plain`, 300, 3)
	insertPriced(t, db.DB, "b.2", 1, "x", 1, 0)
	insertPriced(t, db.DB, "a", 1, `with,comma`, 200, 2)
	insertPriced(t, db.DB, "Z-1", 1, `say "hi"`, 100, 1)
	insertPriced(t, db.DB, "B", 10, ` leading and trailing `, 5000, 500)
	insertPriced(t, db.DB, "B", 3, `\.`, 7, 0)
	insertPriced(t, db.DB, "B", 4, `\N`, 8, 0)
	insertPriced(t, db.DB, "B", 5, `back\slash 'single' ünïcödé €`, 9, 0)
	insertPriced(t, db.DB, "B", 6, `"`, 10, 0)
	insertPriced(t, db.DB, "B", 7, `,`, 11, 0)
	insertPriced(t, db.DB, "a", 3, "line\nbreak", 12, 0) // not loadable, but quoted correctly
	insertPriced(t, db.DB, "a", 4, "cr\rhere", 13, 0)

	var buf bytes.Buffer
	n, err := export.NewStore(db, "").Write(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		export.Header,
		`B,\.,7,0,7`,
		`B,\N,8,0,8`,
		`B,back\slash 'single' ünïcödé €,9,0,9`,
		`B,"""",10,0,10`,
		`B,",",11,0,11`,
		`B, leading and trailing ,5000,500,4500`,
		`Z-1,"say ""hi""",100,1,99`,
		`a,"with,comma",200,2,198`,
		`a,plain,300,3,297`,
		"a,\"line\nbreak\",12,0,12",
		"a,\"cr\rhere\",13,0,13",
		`b.2,x,1,0,1`,
	}, "\n") + "\n"
	if got := buf.String(); got != want {
		t.Fatalf("export =\n%s\nwant\n%s", got, want)
	}
	if n != 12 {
		t.Fatalf("rows = %d, want 12", n)
	}
}

func TestWriteEmpty(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	var buf bytes.Buffer
	n, err := export.NewStore(db, "").Write(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || buf.String() != export.Header+"\n" {
		t.Fatalf("empty export = %d rows, %q", n, buf.String())
	}
}

type failingWriter struct{}

var errDiskFull = errors.New("disk full")

func (failingWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// A writer error is returned, and the pool stays usable.
func TestWriteWriterError(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	if _, err := db.ExecContext(context.Background(), `INSERT INTO baton.priced
		(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		SELECT 'c', g, 'r' || g, 1, 0, 1, 1, 'test' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	_, err := export.NewStore(db, "").Write(context.Background(), failingWriter{})
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("Write to a failing writer = %v, want %v", err, errDiskFull)
	}
	var buf bytes.Buffer
	n, err := export.NewStore(db, "").Write(context.Background(), &buf)
	if err != nil || n != 20000 {
		t.Fatalf("export after a failed one = %d, %v", n, err)
	}
}
