package seed_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/batonhq/baton/pricing/seed"
)

// The uniform shape writes exactly the bytes the generator wrote before
// shapes existed (hashes taken from that version), whether it is left
// zero or named.
func TestUniformOutputUnchanged(t *testing.T) {
	t.Parallel()
	cases := []struct {
		o              seed.Options
		tiers, records string
	}{
		{seed.Options{Contracts: 1, RecordsPerContract: 1, Seed: 1, Prefix: ""}, "f842d6cf33c819f53095cb605d13fe073f4b1d38d0f0dba5145b304ac805a448", "49bd230c18911f88b27da511bce5f9b041724fa1db23adb44646d6bb494e0991"},
		{seed.Options{Contracts: 20, RecordsPerContract: 50, Seed: 7, Prefix: ""}, "79946dbc8629b661ea88f639f8475e97a306254b502ebf1cec61b18a5c2e0b00", "8ea584b4b054b9c60473ea14641cc9c268f38330401133707142baa5dc42607d"},
		{seed.Options{Contracts: 1000, RecordsPerContract: 100, Seed: 1, Prefix: "c"}, "9a37d864f0f7e3546fca3e19cc0566f3ccb01795ab89aef87d1da75dbafb3b57", "1e93e96b4ebceb2390880a924928a4a4aa36e50eb43c93ca68e9aba26297a621"},
		{seed.Options{Contracts: 3, RecordsPerContract: 0, Seed: 42, Prefix: "demo"}, "b6568424840ae36e106ba0f05a14b37f4e3b7df9a65d436f7cde89dd7297e401", "d497ce7569f8cd00fc3ed2ee36467ddaa0b5bb23ae323e69eef7645bf054ee8b"},
		{seed.Options{Contracts: 7, RecordsPerContract: 3001, Seed: 18446744073709551615, Prefix: "x"}, "efc63c2b0a207f4c1c59a9d32a9286f90d75c433a64a552c6f28da73122326aa", "4ae5ec101a7273a923599d8bed3317522dbce0671dd921f635c95622dc3b7120"},
	}
	for _, tc := range cases {
		for _, shape := range []string{"zero", "uniform"} {
			o := tc.o
			if shape == "uniform" {
				o.Shape = mustShape(t, "uniform")
			}
			tb, rb := generate(t, o)
			if got := fmt.Sprintf("%x", sha256.Sum256(tb)); got != tc.tiers {
				t.Errorf("%+v (%s): tiers hash %s, want %s", tc.o, shape, got, tc.tiers)
			}
			if got := fmt.Sprintf("%x", sha256.Sum256(rb)); got != tc.records {
				t.Errorf("%+v (%s): records hash %s, want %s", tc.o, shape, got, tc.records)
			}
		}
	}
}

func mustShape(t *testing.T, s string) seed.Shape {
	t.Helper()
	sh, err := seed.ParseShape(s)
	if err != nil {
		t.Fatal(err)
	}
	return sh
}

func sizes(t *testing.T, o seed.Options) []int64 {
	t.Helper()
	s, err := o.Sizes()
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != o.Contracts {
		t.Fatalf("%d sizes for %d contracts", len(s), o.Contracts)
	}
	var sum int64
	for i, n := range s {
		if n < 1 && o.Records() > 0 {
			t.Fatalf("%s: contract %d has %d records", o.Shape, i, n)
		}
		sum += n
	}
	if sum != o.Records() {
		t.Fatalf("%s, %d×%d: sizes sum to %d, want %d", o.Shape, o.Contracts, o.RecordsPerContract, sum, o.Records())
	}
	return s
}

func TestZipfSizes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		contracts, per int
		s              float64
	}{
		{1000, 1000, 1.1}, {1000, 5000, 1.1}, {2, 3, 1.1}, {17, 1, 0.5}, {50, 20000, 2}, {1000, 1, 1.1}, {300, 2, 3}, {5, 7, 40},
	} {
		o := seed.Options{Contracts: tc.contracts, RecordsPerContract: tc.per, Shape: seed.Shape{Kind: seed.Zipf, Param: tc.s}}
		got := sizes(t, o)
		var w float64
		for i := range got {
			w += math.Pow(float64(i+1), -tc.s)
		}
		// Shares below one record are lifted to one, taken from the
		// largest contracts; otherwise every size is within one record of
		// its exact share.
		lifted := float64(o.Records())*math.Pow(float64(tc.contracts), -tc.s)/w < 1
		for i := range got {
			if i > 0 && got[i] > got[i-1] {
				t.Fatalf("%v: contract %d has %d records, more than contract %d's %d", tc, i, got[i], i-1, got[i-1])
			}
			q := float64(o.Records()) * math.Pow(float64(i+1), -tc.s) / w
			if !lifted && math.Abs(float64(got[i])-q) >= 1 {
				t.Fatalf("%v: contract %d has %d records, its exact share is %.3f", tc, i, got[i], q)
			}
		}
	}
	// The benchmark's shape: the largest contract holds about 18% of 1M
	// records, the smallest about 90.
	got := sizes(t, seed.Options{Contracts: 1000, RecordsPerContract: 1000, Shape: mustShape(t, "zipf:1.1")})
	if got[0] < 170_000 || got[0] > 190_000 || got[999] < 85 || got[999] > 95 {
		t.Fatalf("zipf:1.1 over 1000 contracts: largest %d, smallest %d", got[0], got[999])
	}
	// Shares too small to round to a record: every contract still gets
	// one, taken from the largest.
	got = sizes(t, seed.Options{Contracts: 1000, RecordsPerContract: 1, Shape: mustShape(t, "zipf:2")})
	for i, n := range got {
		if n != 1 {
			t.Fatalf("zipf:2 with one record per contract: contract %d has %d", i, n)
		}
	}
}

func TestHotSizes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		contracts, per int
		f              float64
		hot            int64
	}{
		{1000, 1000, 0.5, 500_000},
		{1000, 1000, 0.9, 900_000},
		{3, 10, 0.5, 15},
		{10, 1, 0.99, 1},            // the others need one record each
		{10, 3, 0.001, 1},           // at least one record
		{4, 1001, 0.3333, 1335},     // 1334.53 rounded
		{1, 50, 0.5, 50},            // one contract holds everything
		{200, 5000, 0.05, 50_000},   // hot need not be the largest share
		{7, 100, 0.999999, 700 - 6}, // clamped
	} {
		o := seed.Options{Contracts: tc.contracts, RecordsPerContract: tc.per, Shape: seed.Shape{Kind: seed.Hot, Param: tc.f}}
		got := sizes(t, o)
		if got[0] != tc.hot {
			t.Fatalf("%+v: hot contract has %d records, want %d", tc, got[0], tc.hot)
		}
		lo, hi := int64(math.MaxInt64), int64(0)
		for _, n := range got[1:] {
			lo, hi = min(lo, n), max(hi, n)
		}
		if len(got) > 1 && hi-lo > 1 {
			t.Fatalf("%+v: the other contracts have %d to %d records, not evenly spread", tc, lo, hi)
		}
	}
}

func TestUniformSizes(t *testing.T) {
	t.Parallel()
	for _, n := range sizes(t, seed.Options{Contracts: 200, RecordsPerContract: 5000}) {
		if n != 5000 {
			t.Fatalf("uniform: a contract with %d records, want 5000", n)
		}
	}
	if s := sizes(t, seed.Options{Contracts: 5, RecordsPerContract: 0, Shape: mustShape(t, "zipf:1.1")}); s[0] != 0 {
		t.Fatalf("no records: sizes %v", s)
	}
}

// The records file holds exactly the sizes, ids r0, r1, … of each
// contract in order, interleaved round by round.
func TestRecordsFollowTheShape(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"uniform", "zipf:1.1", "hot:0.5", "hot:0.9", "zipf:3"} {
		o := seed.Options{Contracts: 37, RecordsPerContract: 40, Seed: 3, Shape: mustShape(t, shape)}
		want := sizes(t, o)
		_, records := generate(t, o)
		sc := bufio.NewScanner(bytes.NewReader(records))
		sc.Scan() // header
		next := make([]int64, o.Contracts)
		round, last := int64(0), -1
		var rows int64
		for sc.Scan() {
			f := strings.Split(sc.Text(), ",")
			i, err := strconv.Atoi(strings.TrimPrefix(f[0], "c-"))
			if err != nil || f[0] != o.ContractID(i) {
				t.Fatalf("%s: bad contract id in %q", shape, sc.Text())
			}
			j, _ := strconv.ParseInt(strings.TrimPrefix(f[1], "r"), 10, 64)
			if j != next[i] {
				t.Fatalf("%s: contract %d's record %s, want r%d", shape, i, f[1], next[i])
			}
			next[i]++
			// Rounds: record j of contracts in increasing order, then j+1.
			if j != round {
				if j != round+1 {
					t.Fatalf("%s: record r%d in round %d", shape, j, round)
				}
				round, last = j, -1
			}
			if i <= last {
				t.Fatalf("%s: contract %d after %d within round %d", shape, i, last, round)
			}
			last = i
			rows++
		}
		for i := range want {
			if next[i] != want[i] {
				t.Fatalf("%s: contract %d has %d records in the file, want %d", shape, i, next[i], want[i])
			}
		}
		if rows != o.Records() {
			t.Fatalf("%s: %d records, want %d", shape, rows, o.Records())
		}
	}
}

func TestShapesDeterministic(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, shape := range []string{"uniform", "zipf:1.1", "zipf:1.2", "hot:0.5", "hot:0.9"} {
		o := seed.Options{Contracts: 30, RecordsPerContract: 20, Seed: 9, Shape: mustShape(t, shape)}
		t1, r1 := generate(t, o)
		t2, r2 := generate(t, o)
		if !bytes.Equal(t1, t2) || !bytes.Equal(r1, r2) {
			t.Fatalf("%s: same options produced different data", shape)
		}
		h := fmt.Sprintf("%x", sha256.Sum256(r1))
		if other, ok := seen[h]; ok {
			t.Fatalf("%s and %s produced the same records", shape, other)
		}
		seen[h] = shape
	}
}

func TestParseShape(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]seed.Shape{
		"uniform":  {},
		"zipf:1.1": {Kind: seed.Zipf, Param: 1.1},
		"zipf:2":   {Kind: seed.Zipf, Param: 2},
		"hot:0.5":  {Kind: seed.Hot, Param: 0.5},
		"hot:.9":   {Kind: seed.Hot, Param: 0.9},
	} {
		got, err := seed.ParseShape(text)
		if err != nil || got != want {
			t.Fatalf("ParseShape(%q) = %v, %v; want %v", text, got, err, want)
		}
		if again, err := seed.ParseShape(got.String()); err != nil || again != got {
			t.Fatalf("%q does not read back: %v, %v", got.String(), again, err)
		}
	}
	for text, msg := range map[string]string{
		"":           "want uniform, zipf:S",
		"zipf":       "want zipf:S",
		"hot":        "want hot:F",
		"zipf:0":     "above 0",
		"zipf:-1":    "above 0",
		"zipf:NaN":   "above 0",
		"zipf:+Inf":  "above 0",
		"zipf:x":     `"x" is not a number`,
		"hot:0":      "between 0 and 1",
		"hot:1":      "between 0 and 1",
		"hot:1.5":    "between 0 and 1",
		"uniform:2":  "no parameter",
		"pareto:1.1": "want uniform, zipf:S",
		"Zipf:1.1":   "want uniform, zipf:S",
	} {
		_, err := seed.ParseShape(text)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Fatalf("ParseShape(%q): error %v, want one saying %q", text, err, msg)
		}
	}
}

func TestInvalidOptionsRefused(t *testing.T) {
	t.Parallel()
	for _, o := range []seed.Options{
		{Contracts: 3, RecordsPerContract: 2, Shape: seed.Shape{Kind: seed.Zipf}},
		{Contracts: 3, RecordsPerContract: 2, Shape: seed.Shape{Kind: seed.Hot, Param: 1}},
		{Contracts: 3, RecordsPerContract: 2, Shape: seed.Shape{Kind: 9, Param: 1}},
		{Contracts: 3, RecordsPerContract: -1},
	} {
		if _, err := o.Sizes(); err == nil {
			t.Fatalf("%+v: Sizes accepted it", o)
		}
		var b bytes.Buffer
		if err := seed.WriteRecords(&b, o, nil); err == nil || b.Len() != 0 {
			t.Fatalf("%+v: WriteRecords wrote %d bytes, error %v", o, b.Len(), err)
		}
	}
}
