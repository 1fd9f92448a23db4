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
	"github.com/batonhq/baton/pricing/export"
)

// Export writes to standard output or a file; a plain export says what it
// left out, a complete one writes nothing while a record is unpriced.
func TestExport(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	loadCSV(t, db, "contract_id,threshold_minor,discount_bp\na,0,0\n", "contract_id,record_id,amount_minor\na,r1,10\na,r2,20\n")
	// A priced row, but no checkpoint yet: both records count as unpriced.
	insertPriced(t, db.DB, "a", 1, "r1", 10, 0)
	store := export.NewStore(db, "")

	var stdout bytes.Buffer
	res, err := store.Export(ctx, export.Options{Out: "-", Stdout: &stdout})
	if err != nil || res.Rows != 1 || stdout.String() != export.Header+"\na,r1,10,0,10\n" || res.Progress.Unpriced != 2 {
		t.Fatalf("export to stdout: %+v, %v, %q", res, err, stdout.String())
	}
	var summary strings.Builder
	res.WriteSummary(&summary, "-")
	if summary.String() != "warning: 2 records are not priced yet and were not exported (--complete fails instead)\n" {
		t.Errorf("summary: %q", summary.String())
	}

	out := filepath.Join(t.TempDir(), "priced.csv")
	if _, err := store.Export(ctx, export.Options{Out: out, Complete: true}); !errors.Is(err, export.ErrIncomplete) {
		t.Fatalf("complete export of an unpriced record: %v, want ErrIncomplete", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused complete export left a file: %v", err)
	}
	res, err = store.Export(ctx, export.Options{Out: out, Previous: true})
	if err != nil || res.Rows != 1 {
		t.Fatalf("previous generation to a file: %+v, %v", res, err)
	}
	summary.Reset()
	res.WriteSummary(&summary, out)
	if summary.String() != "exported 1 priced records to "+out+"\n" {
		t.Errorf("summary: %q", summary.String())
	}
}
