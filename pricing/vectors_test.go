package pricing_test

import (
	"encoding/csv"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/batonhq/baton/pricing"
)

// The golden vectors shared with the rest of the project.
const (
	tiersCSV    = "../testdata/vectors/tiers.csv"
	recordsCSV  = "../testdata/vectors/records.csv"
	expectedCSV = "../testdata/vectors/expected.csv"
)

type vectorRecord struct {
	id     string
	amount int64
}

type vectors struct {
	tiers    map[string][]pricing.Tier // by contract, in file order
	records  map[string][]vectorRecord // by contract, in file order
	expected [][]string                // data rows of expected.csv
	header   []string                  // header of expected.csv
}

// readCSV reads a whole CSV file and checks its header.
func readCSV(tb testing.TB, path string, header []string) [][]string {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatalf("open vectors: %v", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = len(header)
	rows, err := r.ReadAll()
	if err != nil {
		tb.Fatalf("read %s: %v", path, err)
	}
	if len(rows) == 0 || !slices.Equal(rows[0], header) {
		tb.Fatalf("%s: header %v, want %v", path, rows[:min(1, len(rows))], header)
	}
	return rows[1:]
}

func parseInt(tb testing.TB, path string, line int, s string) int64 {
	tb.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		tb.Fatalf("%s:%d: %v", path, line, err)
	}
	return v
}

func loadVectors(tb testing.TB) *vectors {
	tb.Helper()
	v := &vectors{
		tiers:   map[string][]pricing.Tier{},
		records: map[string][]vectorRecord{},
		header:  []string{"contract_id", "record_id", "gross_minor", "discount_minor", "net_minor"},
	}
	for i, row := range readCSV(tb, tiersCSV, []string{"contract_id", "threshold_minor", "discount_bp"}) {
		v.tiers[row[0]] = append(v.tiers[row[0]], pricing.Tier{
			ThresholdMinor: parseInt(tb, tiersCSV, i+2, row[1]),
			DiscountBP:     parseInt(tb, tiersCSV, i+2, row[2]),
		})
	}
	for i, row := range readCSV(tb, recordsCSV, []string{"contract_id", "record_id", "amount_minor"}) {
		v.records[row[0]] = append(v.records[row[0]], vectorRecord{
			id:     row[1],
			amount: parseInt(tb, recordsCSV, i+2, row[2]),
		})
	}
	v.expected = readCSV(tb, expectedCSV, v.header)
	return v
}

// contracts returns the contracts with records, in byte order.
func (v *vectors) contracts() []string {
	var ids []string
	for id := range v.records {
		ids = append(ids, id)
	}
	slices.Sort(ids) // string comparison is byte order
	return ids
}

func TestGoldenVectors(t *testing.T) {
	t.Parallel()
	v := loadVectors(t)

	var got [][]string
	for _, id := range v.contracts() {
		s, err := pricing.NewSchedule(v.tiers[id])
		if err != nil {
			t.Fatalf("contract %s: %v", id, err)
		}
		ref, err := newRefSchedule(v.tiers[id])
		if err != nil {
			t.Fatalf("contract %s: %v", id, err)
		}
		c, err := s.Resume(0)
		if err != nil {
			t.Fatalf("contract %s: %v", id, err)
		}
		var sumNet int64
		for _, rec := range v.records[id] {
			g0 := c.CumGross()
			line, err := c.Next(rec.amount)
			if err != nil {
				t.Fatalf("contract %s record %s: %v", id, rec.id, err)
			}
			if want := ref.price(g0, rec.amount); line != want {
				t.Errorf("contract %s record %s: engine %+v, reference %+v", id, rec.id, line, want)
			}
			sumNet += line.Net
			got = append(got, []string{id, rec.id,
				strconv.FormatInt(line.Gross, 10),
				strconv.FormatInt(line.Discount, 10),
				strconv.FormatInt(line.Net, 10)})
		}
		total, err := s.Rounded(c.CumGross())
		if err != nil {
			t.Fatal(err)
		}
		if sumNet != total || c.CumNet() != total {
			t.Errorf("contract %s: Σ net %d, CumNet %d, Rounded(%d) %d", id, sumNet, c.CumNet(), c.CumGross(), total)
		}
	}

	if len(got) != len(v.expected) {
		t.Errorf("priced %d rows, expected.csv has %d", len(got), len(v.expected))
	}
	for i := range min(len(got), len(v.expected)) {
		if !slices.Equal(got[i], v.expected[i]) {
			t.Errorf("expected.csv line %d: got %q, want %q", i+2, got[i], v.expected[i])
		}
	}
}
