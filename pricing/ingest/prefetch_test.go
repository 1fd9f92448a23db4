package ingest

import (
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"testing"
)

// Reading ahead gives every row's results in file order, row errors
// included, with the hash of each valid row's record id, then the end
// again and again.
func TestReadAheadInOrder(t *testing.T) {
	var b strings.Builder
	b.WriteString(rh)
	const n = 3*readAheadBatch + 7
	for i := range n {
		if i%1000 == 999 {
			fmt.Fprintf(&b, "c1,bad%d,x\n", i)
			continue
		}
		fmt.Fprintf(&b, "c1,r%d,%04d\n", i, i+1)
	}
	r, err := NewRecordsReader(strings.NewReader(b.String()), "r.csv")
	if err != nil {
		t.Fatal(err)
	}
	seed := maphash.MakeSeed()
	a := newReadAhead(r, seed, nil)
	defer a.close()
	for i := range n {
		it := a.next()
		if i%1000 == 999 {
			var le *LineError
			if !errors.As(it.err, &le) || le.Line != int64(i+2) {
				t.Fatalf("row %d: %v, want a line error on line %d", i, it.err, i+2)
			}
			continue
		}
		raw := ""
		if i+1 < 1000 {
			raw = fmt.Sprintf("c1,r%d,%04d", i, i+1)
		}
		if it.err != nil || it.row.RecordID != fmt.Sprintf("r%d", i) || it.row.AmountMinor != int64(i+1) || it.raw != raw ||
			it.hash != maphash.String(seed, it.row.RecordID) {
			t.Fatalf("row %d: %+v", i, it)
		}
	}
	for range 2 {
		if it := a.next(); it.err != io.EOF {
			t.Fatalf("after the last row: %+v, want io.EOF", it)
		}
	}
}

// A fatal error ends the reading and is returned again; closing early
// returns once the reading goroutines have ended, even when they were
// blocked handing over a batch.
func TestReadAheadFatalAndClose(t *testing.T) {
	long := rh + "c1,a,1\n\"" + strings.Repeat("x", maxRecordBytes+10) + "\n"
	r, err := NewRecordsReader(strings.NewReader(long), "r.csv")
	if err != nil {
		t.Fatal(err)
	}
	a := newReadAhead(r, maphash.MakeSeed(), nil)
	if it := a.next(); it.err != nil {
		t.Fatalf("first row: %v", it.err)
	}
	first := a.next().err
	var ie *InvalidInputError
	if !errors.As(first, &ie) || a.next().err != first {
		t.Fatalf("fatal error %v, then %v; want the same *InvalidInputError twice", first, a.next().err)
	}
	a.close()

	var b strings.Builder
	b.WriteString(rh)
	for i := range 20 * readAheadBatch {
		fmt.Fprintf(&b, "c1,r%d,1\n", i)
	}
	if r, err = NewRecordsReader(strings.NewReader(b.String()), "r.csv"); err != nil {
		t.Fatal(err)
	}
	a = newReadAhead(r, maphash.MakeSeed(), nil)
	a.next()
	a.close() // with the reader blocked on a full channel
}
