package ingest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

const (
	th = TiersHeader + "\n"
	rh = RecordsHeader + "\n"
)

// goodTiers is loaded before the records cases.
const goodTiers = th + "c1,0,0\nc1,1000,100\nc2,0,50\n"

// invalidCase is an input that must be refused as a whole. want are the
// messages of the listed problems, in order, with the input paths
// replaced by tiers.csv and records.csv.
type invalidCase struct {
	name     string
	tiers    string // tiers file content, "" for none
	records  string // records file content, "" for none
	want     []string
	maxGross int64
}

func tierCases() []invalidCase {
	long := strings.Repeat("x", 65)
	var many strings.Builder
	many.WriteString(th)
	for i := range 65 {
		fmt.Fprintf(&many, "c9,%d,%d\n", i*10, i)
	}
	// The count is reported once, on the contract's first row; the other
	// rows point to it.
	manyWant := []string{"tiers.csv:2: contract c9 has 65 tier rows, at most 64 are allowed"}
	for i := range 19 {
		manyWant = append(manyWant, fmt.Sprintf("tiers.csv:%d: tier set of contract c9 is rejected because line 2 is invalid", i+3))
	}
	return []invalidCase{
		{name: "header", tiers: "contract_id,threshold,discount_bp\nc1,0,0\n",
			want: []string{`tiers.csv:1: header is "contract_id,threshold,discount_bp", want "contract_id,threshold_minor,discount_bp"`}},
		{name: "header_fields", tiers: "contract_id,threshold_minor,discount_bp,x\n",
			want: []string{`tiers.csv:1: header is "contract_id,threshold_minor,discount_bp,x", want "contract_id,threshold_minor,discount_bp"`}},
		{name: "header_bom_then_bad_row", tiers: "\uFEFF" + th + "c1,0,10001\n",
			want: []string{`tiers.csv:2: discount_bp 10001 is out of range (must be 0 to 10000)`}},
		{name: "records_header_in_tiers", tiers: rh,
			want: []string{`tiers.csv:1: header is "contract_id,record_id,amount_minor", want "contract_id,threshold_minor,discount_bp"`}},
		{name: "blank_only", tiers: "\n\r\n\n",
			want: []string{`tiers.csv:1: file is empty, want the header "contract_id,threshold_minor,discount_bp"`}},
		{name: "fields_few", tiers: th + "c1,0,0\nc2,0\n",
			want: []string{`tiers.csv:3: has 2 fields, want 3 (contract_id,threshold_minor,discount_bp)`}},
		{name: "fields_many", tiers: th + "c1,0,0,\n",
			want: []string{`tiers.csv:2: has 4 fields, want 3 (contract_id,threshold_minor,discount_bp)`}},
		{name: "contract_char", tiers: th + "c 1,0,0\n",
			want: []string{`tiers.csv:2: contract_id "c 1" has a character outside A-Z a-z 0-9 . _ : -`}},
		{name: "contract_unicode", tiers: th + "cé,0,0\n",
			want: []string{`tiers.csv:2: contract_id "cé" has a character outside A-Z a-z 0-9 . _ : -`}},
		{name: "contract_long", tiers: th + long + ",0,0\n",
			want: []string{`tiers.csv:2: contract_id "` + long[:48] + `…" is 65 characters long, at most 64 are allowed`}},
		{name: "contract_empty", tiers: th + ",0,0\n",
			want: []string{`tiers.csv:2: contract_id is empty`}},
		{name: "threshold_word", tiers: th + "c1,abc,0\n",
			want: []string{`tiers.csv:2: threshold_minor "abc" is not an integer`}},
		{name: "threshold_decimal", tiers: th + "c1,1.5,0\n",
			want: []string{`tiers.csv:2: threshold_minor "1.5" is not an integer`}},
		{name: "threshold_space", tiers: th + "c1, 1,0\n",
			want: []string{`tiers.csv:2: threshold_minor " 1" is not an integer`}},
		{name: "threshold_plus", tiers: th + "c1,+1,0\n",
			want: []string{`tiers.csv:2: threshold_minor "+1" is not an integer`}},
		{name: "threshold_empty", tiers: th + "c1,,0\n",
			want: []string{`tiers.csv:2: threshold_minor is empty`}},
		{name: "threshold_negative", tiers: th + "c1,-1,0\n",
			want: []string{`tiers.csv:2: threshold_minor -1 is out of range (must be ≥ 0)`}},
		{name: "threshold_minus_zero", tiers: th + "c1,-0,0\n",
			want: []string{`tiers.csv:2: threshold_minor -0 is out of range (must be ≥ 0)`}},
		{name: "threshold_overflow", tiers: th + "c1,9223372036854775808,0\n",
			want: []string{`tiers.csv:2: threshold_minor 9223372036854775808 overflows a 64-bit integer (must be ≥ 0)`}},
		{name: "discount_high", tiers: th + "c1,0,10001\n",
			want: []string{`tiers.csv:2: discount_bp 10001 is out of range (must be 0 to 10000)`}},
		{name: "discount_negative", tiers: th + "c1,0,-1\n",
			want: []string{`tiers.csv:2: discount_bp -1 is out of range (must be 0 to 10000)`}},
		{name: "duplicate_threshold", tiers: th + "c1,0,0\nc2,5,0\nc1,5,10\nc1,005,20\n",
			want: []string{
				`tiers.csv:2: tier set of contract c1 is rejected because line 5 is invalid`,
				`tiers.csv:4: tier set of contract c1 is rejected because line 5 is invalid`,
				`tiers.csv:5: duplicate threshold_minor 5 for contract c1 (first on line 4)`,
			}},
		{name: "too_many_tiers", tiers: many.String(), want: manyWant},
		{name: "invalid_utf8", tiers: th + "c1,0,\xff\n",
			want: []string{`tiers.csv:2: discount_bp is not valid UTF-8`}},
		{name: "bare_quote", tiers: th + "c\"1,0,0\nc2,0,0\n",
			want: []string{`tiers.csv:2: malformed CSV: bare " in non-quoted-field (at column 2)`}},
		{name: "unclosed_quote", tiers: th + "c1,0,0\nc2,\"0,0\nc3,0,0\n",
			want: []string{`tiers.csv:3: malformed CSV: extraneous or missing " in quoted-field (at line 4, column 8)`}},
		{name: "set_rejected", tiers: th + "c1,0,0\nc1,10,x\n",
			want: []string{
				`tiers.csv:2: tier set of contract c1 is rejected because line 3 is invalid`,
				`tiers.csv:3: discount_bp "x" is not an integer`,
			}},
		// Every invalid line of the set is counted and named, not just the first.
		{name: "set_rejected_two", tiers: th + "c1,0,0\nc1,10,x\nc1,20,y\nc1,30,5\n",
			want: []string{
				`tiers.csv:2: tier set of contract c1 is rejected because 2 of its lines are invalid: 3, 4`,
				`tiers.csv:3: discount_bp "x" is not an integer`,
				`tiers.csv:4: discount_bp "y" is not an integer`,
				`tiers.csv:5: tier set of contract c1 is rejected because 2 of its lines are invalid: 3, 4`,
			}},
		{name: "set_rejected_many", tiers: setRejectedMany.tiers, want: setRejectedMany.want},
	}
}

// setRejectedMany is a tier set with 22 invalid lines: the message on its
// valid line names the first 20 and counts the rest.
var setRejectedMany = func() (c struct {
	tiers string
	want  []string
}) {
	var b strings.Builder
	b.WriteString(th + "c1,0,0\n")
	var lines []string
	for i := range 22 {
		fmt.Fprintf(&b, "c1,%d,x\n", 10*(i+1))
		if i < 20 {
			lines = append(lines, fmt.Sprint(i+3))
		}
	}
	c.tiers = b.String()
	c.want = []string{"tiers.csv:2: tier set of contract c1 is rejected because 22 of its lines are invalid: " + strings.Join(lines, ", ") + " and 2 more"}
	for i := range 19 {
		c.want = append(c.want, fmt.Sprintf(`tiers.csv:%d: discount_bp "x" is not an integer`, i+3))
	}
	return c
}()

func recordCases() []invalidCase {
	id128 := strings.Repeat("é", 128)
	return []invalidCase{
		{name: "header", records: "contract_id,record_id,amount\nc1,r1,1\n",
			want: []string{`records.csv:1: header is "contract_id,record_id,amount", want "contract_id,record_id,amount_minor"`}},
		{name: "header_crlf_ok_row_bad", records: "contract_id,record_id,amount_minor\r\nc1,r1,0\r\n",
			want: []string{`records.csv:2: amount_minor 0 is out of range (must be 1 to 1000000000000)`}},
		{name: "fields", records: rh + "c1,r1\n",
			want: []string{`records.csv:2: has 2 fields, want 3 (contract_id,record_id,amount_minor)`}},
		{name: "unknown_contract", records: rh + "c1,r1,1\nnope,r1,1\n",
			want: []string{`records.csv:3: unknown contract nope`}},
		{name: "unknown_contract_rejected_tiers", tiers: th + "c3,0,0\nc3,0,1\n", records: rh + "c3,r1,1\n",
			want: []string{
				`tiers.csv:2: tier set of contract c3 is rejected because line 3 is invalid`,
				`tiers.csv:3: duplicate threshold_minor 0 for contract c3 (first on line 2)`,
				`records.csv:2: unknown contract c3 (its tier set in tiers.csv was rejected)`,
			}},
		{name: "contract_id", records: rh + "c:1/x,r1,1\n",
			want: []string{`records.csv:2: contract_id "c:1/x" has a character outside A-Z a-z 0-9 . _ : -`}},
		{name: "record_id_empty", records: rh + "c1,,1\n",
			want: []string{`records.csv:2: record_id is empty`}},
		{name: "record_id_long", records: rh + "c1," + id128 + ",1\nc1," + id128 + "é,1\n",
			want: []string{`records.csv:3: record_id "` + strings.Repeat("é", 24) + `…" is 129 characters long, at most 128 are allowed`}},
		{name: "record_id_tab", records: rh + "c1,a\tb,1\n",
			want: []string{`records.csv:2: record_id "a\tb" has a non-printable character U+0009 at position 2`}},
		{name: "record_id_newline", records: rh + "c1,\"a\r\nb\",1\nc1,ok,1\n",
			want: []string{`records.csv:2: record_id "a\nb" has a non-printable character U+000A at position 2`}},
		{name: "record_id_nbsp", records: rh + "c1,a\u00a0b,1\n",
			want: []string{`records.csv:2: record_id "a\u00a0b" has a non-printable character U+00A0 at position 2`}},
		{name: "record_id_utf8", records: rh + "c1,r\xc3,1\n",
			want: []string{`records.csv:2: record_id is not valid UTF-8`}},
		{name: "record_id_nul", records: rh + "c1,r\x00,1\n",
			want: []string{`records.csv:2: record_id "r\x00" has a non-printable character U+0000 at position 2`}},
		{name: "amount_zero", records: rh + "c1,r1,0\n",
			want: []string{`records.csv:2: amount_minor 0 is out of range (must be 1 to 1000000000000)`}},
		{name: "amount_high", records: rh + "c1,r1,1000000000001\n",
			want: []string{`records.csv:2: amount_minor 1000000000001 is out of range (must be 1 to 1000000000000)`}},
		{name: "amount_negative", records: rh + "c1,r1,-5\n",
			want: []string{`records.csv:2: amount_minor -5 is out of range (must be 1 to 1000000000000)`}},
		{name: "amount_word", records: rh + "c1,r1,12a\n",
			want: []string{`records.csv:2: amount_minor "12a" is not an integer`}},
		{name: "amount_empty", records: rh + "c1,r1,\n",
			want: []string{`records.csv:2: amount_minor is empty`}},
		{name: "same_id_other_amount", records: rh + "c1,r1,5\nc2,r1,6\nc1,r1,6\nc1,r1,5\n",
			want: []string{`records.csv:4: record_id "r1" of contract c1 has amount_minor 6 here but 5 on line 2`}},
		{name: "gross_overflow", maxGross: 100, records: rh + "c1,a,50\nc2,a,99\nc1,b,50\nc1,c,1\nc1,d,1\n",
			want: []string{
				`records.csv:5: cumulative gross of contract c1 would exceed 100`,
				`records.csv:6: cumulative gross of contract c1 would exceed 100`,
			}},
		{name: "bare_quote", records: rh + "c1,r\"1,5\n",
			want: []string{`records.csv:2: malformed CSV: bare " in non-quoted-field (at column 5)`}},
	}
}

// TestInvalidInput checks each input rule: the load fails with the right
// FILE:LINE: reason and changes nothing.
func TestInvalidInput(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, c invalidCase, preload bool) {
		t.Parallel()
		db := pgtest.NewDB(t)
		ctx := context.Background()
		if preload {
			mustLoad(t, db, Options{TiersPath: writeFile(t, "pre.csv", goodTiers)})
			mustLoad(t, db, Options{RecordsPath: writeFile(t, "pre-records.csv", rh+"c2,existing,1\n")})
		}
		before := tableCounts(t, db)
		opts := Options{maxGross: c.maxGross}
		dir := t.TempDir()
		if c.tiers != "" {
			opts.TiersPath = filepath.Join(dir, "tiers.csv")
			writeTo(t, opts.TiersPath, c.tiers)
		}
		if c.records != "" {
			opts.RecordsPath = filepath.Join(dir, "records.csv")
			writeTo(t, opts.RecordsPath, c.records)
		}
		rep, err := load(ctx, db, opts)
		var ie *InvalidInputError
		if !errors.As(err, &ie) {
			t.Fatalf("Load = %+v, %v; want an *InvalidInputError", rep, err)
		}
		var got []string
		for _, le := range ie.Errors {
			got = append(got, strings.ReplaceAll(le.Error(), dir+string(filepath.Separator), ""))
			if !strings.Contains(err.Error(), le.Error()) {
				t.Errorf("error message lacks %q:\n%s", le.Error(), err)
			}
		}
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("problems listed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
		}
		if ie.Total < int64(len(c.want)) {
			t.Errorf("Total = %d, want at least %d", ie.Total, len(c.want))
		}
		if after := tableCounts(t, db); after != before {
			t.Errorf("failed load changed the tables: %+v, before %+v", after, before)
		}
		var loads int64
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM baton.loads").Scan(&loads); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{false: 0, true: 2}[preload]; loads != want {
			t.Errorf("%d loads recorded, want %d", loads, want)
		}
	}
	for _, c := range tierCases() {
		t.Run("tiers/"+c.name, func(t *testing.T) { run(t, c, false) })
	}
	for _, c := range recordCases() {
		t.Run("records/"+c.name, func(t *testing.T) { run(t, c, true) })
	}
}
