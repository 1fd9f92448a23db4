package distributor

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/internal/pgtest"
)

// copyTable has a column of every kind CopyRow writes itself and some it
// hands to pgx's encoding.
const copyTable = `(
	i8 bigint, i4 integer, t text, v varchar(20), b bytea, ts timestamptz,
	n numeric, ok boolean, d date, j jsonb)`

var copyColumns = []string{"i8", "i4", "t", "v", "b", "ts", "n", "ok", "d", "j"}

// copyRowsFixture returns rows of copyTable's columns: edge values,
// NULLs, and values given as Go types other than the column's own.
func copyRowsFixture() [][]any {
	ts := time.Date(2026, 11, 30, 23, 59, 58, 123456000, time.FixedZone("x", -5*3600))
	return [][]any{
		{int64(-1 << 63), int64(-1 << 31), "", "naïve", []byte{0, 1, 255}, ts, "12.50", true, time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC), `{"a": [1, 2]}`},
		{int64(1<<63 - 1), int64(1<<31 - 1), "c-000042", []byte("from bytes"), []byte{}, time.Unix(0, 0), pgtype.Numeric{Int: big.NewInt(-7), Exp: -2, Valid: true}, false, "2026-02-28", map[string]any{"k": "v"}},
		{nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
		{"42", int32(7), []byte("bytes as text"), "x", []byte(nil), time.Date(1969, 7, 20, 20, 17, 40, 999999000, time.UTC), int64(3), nil, nil, nil},
	}
}

// txConnFor returns a txConn on one connection of db, as a batch has.
func txConnFor(t testing.TB, db *dbconn.DB) *txConn {
	t.Helper()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &txConn{conn: conn}
}

// Rows written through CopyFrom (every value through CopyRow.Value) and
// through CopyRows' typed methods read back exactly as the same rows
// copied by pgx's own CopyFrom, whatever Go type each value is given as.
func TestCopyRowsWritesWhatPgxWrites(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	for _, name := range []string{"by_pgx", "by_values", "by_methods"} {
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+name+" "+copyTable); err != nil {
			t.Fatal(err)
		}
	}
	rows := copyRowsFixture()
	c := txConnFor(t, db)
	if err := c.raw(func(pc *pgx.Conn) error {
		_, err := pc.CopyFrom(ctx, pgx.Identifier{"by_pgx"}, copyColumns, pgx.CopyFromRows(rows))
		return err
	}); err != nil {
		t.Fatalf("pgx CopyFrom: %v", err)
	}
	i := 0
	n, err := c.copyFrom(ctx, []string{"by_values"}, copyColumns, func() ([]any, error) {
		if i == len(rows) {
			return nil, nil
		}
		i++
		return rows[i-1], nil
	})
	if err != nil || n != int64(len(rows)) {
		t.Fatalf("copyFrom: %d rows, %v", n, err)
	}
	// The typed methods: each value of the fixture by the method of its
	// Go type, Value for the rest.
	i = 0
	n, err = c.copyRows(ctx, []string{"public", "by_methods"}, copyColumns, func(r *CopyRow) (bool, error) {
		if i == len(rows) {
			return false, nil
		}
		for _, v := range rows[i] {
			switch v := v.(type) {
			case nil:
				r.Null()
			case string:
				r.Text(v)
			case []byte:
				r.Bytes(v)
			case int64:
				r.Int64(v)
			case time.Time:
				r.Time(v)
			default:
				r.Value(v)
			}
		}
		i++
		return true, nil
	})
	if err != nil || n != int64(len(rows)) {
		t.Fatalf("copyRows: %d rows, %v", n, err)
	}
	want := tableText(t, db, "by_pgx")
	if len(want) != len(rows) {
		t.Fatalf("pgx copied %d rows, want %d", len(want), len(rows))
	}
	for _, name := range []string{"by_values", "by_methods"} {
		if got := tableText(t, db, name); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n%s\nwant (pgx):\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// A copy of more rows than one COPY message holds arrives whole and in
// order.
func TestCopyRowsManyRows(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE many (k bigint, s text)"); err != nil {
		t.Fatal(err)
	}
	const total = 50_000 // about 1.5 MB: many 64 KB messages, rows across their edges
	k := int64(0)
	n, err := txConnFor(t, db).copyRows(ctx, []string{"many"}, []string{"k", "s"}, func(r *CopyRow) (bool, error) {
		if k == total {
			return false, nil
		}
		k++
		r.Int64(k)
		r.Text(strings.Repeat("x", int(k%37)))
		return true, nil
	})
	if err != nil || n != total {
		t.Fatalf("copyRows: %d rows, %v", n, err)
	}
	var count, bad int64
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE length(s) <> k % 37) FROM many`).Scan(&count, &bad); err != nil {
		t.Fatal(err)
	}
	if count != total || bad != 0 {
		t.Fatalf("%d rows, %d with the wrong text; want %d, 0", count, bad, total)
	}
}

// A fill that fails or panics, or writes the wrong number of values, or
// a value that cannot be the column's type, fails the copy with a reason and
// leaves nothing copied; the connection stays usable.
func TestCopyRowsFailuresCopyNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.OpenDB(t, pgtest.NewURL(t), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE failing (k bigint, s text)"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	cases := []struct {
		name string
		fill func(r *CopyRow) error // for the 5,000th row; earlier rows are good
		want string
	}{
		{"fill error", func(*CopyRow) error { return boom }, "reading the rows to copy: boom"},
		{"too few values", func(r *CopyRow) error { r.Int64(1); return nil }, "1 values in a row of 2 columns"},
		{"too many values", func(r *CopyRow) error { r.Int64(1); r.Text("a"); r.Text("b"); return nil }, "more than 2 values in a row of 2 columns"},
		{"not the column's type", func(r *CopyRow) error { r.Text("forty-two"); r.Text("a"); return nil }, "encoding column k (string)"},
		{"panic", func(r *CopyRow) error { panic("the row's processor broke") }, "panic writing a row: the row's processor broke"},
	}
	c := txConnFor(t, db)
	for _, tc := range cases {
		k := 0
		_, err := c.copyRows(ctx, []string{"failing"}, []string{"k", "s"}, func(r *CopyRow) (bool, error) {
			k++
			if k < 5000 {
				r.Int64(int64(k))
				r.Text("ok")
				return true, nil
			}
			return true, tc.fill(r)
		})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if tc.name == "fill error" && !errors.Is(err, boom) {
			t.Errorf("%s: %v does not wrap the fill's error", tc.name, err)
		}
	}
	if _, err := c.copyRows(ctx, []string{"failing"}, []string{"k", "nope"}, func(*CopyRow) (bool, error) { return false, nil }); err == nil ||
		!strings.Contains(err.Error(), `finding the column types of "failing"`) {
		t.Errorf("unknown column: %v", err)
	}
	var n int
	if err := c.raw(func(pc *pgx.Conn) error {
		return pc.QueryRow(ctx, "SELECT count(*) FROM failing").Scan(&n)
	}); err != nil || n != 0 {
		t.Fatalf("after the failed copies: %d rows, %v; want 0 on a usable connection", n, err)
	}
}

// tableText reads every row of table as text, in a stable order.
func tableText(t *testing.T, db *dbconn.DB, table string) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), fmt.Sprintf(`SELECT x::text FROM %s x ORDER BY x::text`, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// BenchmarkCopyPricedRows copies batches of 16,384 rows shaped like the
// pricer's (three texts, six integers) into an unindexed table, in a
// transaction rolled back after each batch: pgx's CopyFrom of []any
// rows (the baseline, as every batch wrote them before CopyRows),
// CopyFrom (the same rows, through CopyRow.Value) and CopyRows (typed
// calls, nothing boxed). rows/s and allocs/op compare them; the server's
// side of the copy is the same for all three.
func BenchmarkCopyPricedRows(b *testing.B) {
	db := pgtest.OpenDB(b, pgtest.NewURL(b), dbconn.Options{})
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE bench_priced (contract_id text, seq bigint, record_id text,
		gross_minor bigint, discount_minor bigint, net_minor bigint, claim_version bigint, priced_by text, generation bigint)`); err != nil {
		b.Fatal(err)
	}
	cols := []string{"contract_id", "seq", "record_id", "gross_minor", "discount_minor", "net_minor", "claim_version", "priced_by", "generation"}
	const batch = 16384
	ids := make([][]byte, batch)
	for i := range ids {
		ids[i] = fmt.Appendf(nil, "r-%08d", i)
	}
	values := func() func() ([]any, error) {
		i, vals := 0, make([]any, len(cols))
		return func() ([]any, error) {
			if i == batch {
				return nil, nil
			}
			g := int64(1000 + i*37)
			vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7], vals[8] =
				"c-000042", int64(i+1), ids[i], g, g/10, g-g/10, int64(7), "w1#6a763fdd", int64(1)
			i++
			return vals, nil
		}
	}
	run := func(b *testing.B, copyBatch func(*txConn) (int64, error)) {
		c := txConnFor(b, db)
		for b.Loop() {
			if _, err := c.conn.ExecContext(ctx, "BEGIN"); err != nil {
				b.Fatal(err)
			}
			if n, err := copyBatch(c); err != nil || n != batch {
				b.Fatalf("copied %d rows, %v", n, err)
			}
			if _, err := c.conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("pgx_CopyFrom", func(b *testing.B) {
		run(b, func(c *txConn) (n int64, err error) {
			err = c.raw(func(pc *pgx.Conn) error {
				n, err = pc.CopyFrom(ctx, pgx.Identifier{"bench_priced"}, cols, pgx.CopyFromFunc(values()))
				return err
			})
			return n, err
		})
	})
	b.Run("CopyFrom", func(b *testing.B) {
		run(b, func(c *txConn) (int64, error) { return c.copyFrom(ctx, []string{"bench_priced"}, cols, values()) })
	})
	b.Run("CopyRows", func(b *testing.B) {
		run(b, func(c *txConn) (int64, error) {
			i := 0
			return c.copyRows(ctx, []string{"bench_priced"}, cols, func(r *CopyRow) (bool, error) {
				if i == batch {
					return false, nil
				}
				g := int64(1000 + i*37)
				r.Text("c-000042")
				r.Int64(int64(i + 1))
				r.Bytes(ids[i])
				r.Int64(g)
				r.Int64(g / 10)
				r.Int64(g - g/10)
				r.Int64(7)
				r.Text("w1#6a763fdd")
				r.Int64(1)
				i++
				return true, nil
			})
		})
	})
}
