package ingest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

var contractIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// firstLines returns the first n lines of a file, for seeds.
func firstLines(f *testing.F, path string, n int) string {
	f.Helper()
	file, err := os.Open(path)
	if err != nil {
		f.Fatal(err)
	}
	defer file.Close()
	var b strings.Builder
	sc := bufio.NewScanner(file)
	for i := 0; i < n && sc.Scan(); i++ {
		b.WriteString(sc.Text())
		b.WriteString("\n")
	}
	return b.String()
}

// readResult is what a reader made of one call to Next.
type readResult struct {
	row   string // the row's values, or the error's message
	fatal bool
}

// drain reads a whole file through next, checking the properties every
// reader result must have, and returns the results.
func drain(t *testing.T, input, file string, open func() (func() (string, int64, error), error),
	checkRow func(fields string) error) []readResult {
	t.Helper()
	lines := int64(strings.Count(input, "\n") + 1)
	checkLine := func(what string, line int64, msg string) {
		t.Helper()
		if line < 1 || line > lines {
			t.Fatalf("%s names line %d of a %d-line input: %s", what, line, lines, msg)
		}
		if prefix := fmt.Sprintf("%s:%d: ", file, line); !strings.HasPrefix(msg, prefix) || len(msg) == len(prefix) {
			t.Fatalf("%s message %q does not start with %q and a reason", what, msg, prefix)
		}
	}
	checkFatal := func(err error) []readResult {
		t.Helper()
		var ie *InvalidInputError
		if !errors.As(err, &ie) || len(ie.Errors) == 0 {
			t.Fatalf("fatal error %v (%T) is not an *InvalidInputError naming a line", err, err)
		}
		for _, le := range ie.Errors {
			checkLine("fatal error", le.Line, le.Error())
		}
		return []readResult{{row: err.Error(), fatal: true}}
	}
	next, err := open()
	if err != nil {
		return checkFatal(err)
	}
	var out []readResult
	var last int64
	for i := 0; ; i++ {
		if i > len(input) {
			t.Fatalf("more rows than input bytes")
		}
		row, line, err := next()
		if err == io.EOF {
			return out
		}
		var le *LineError
		switch {
		case err == nil:
			if err := checkRow(row); err != nil {
				t.Fatalf("line %d: accepted row %s breaks a rule: %v", line, row, err)
			}
			checkLine("row", line, fmt.Sprintf("%s:%d: ok", file, line))
		case errors.As(err, &le):
			checkLine("row error", le.Line, le.Error())
			if le.Line != line {
				t.Fatalf("row line %d, error line %d", line, le.Line)
			}
			row = err.Error()
		default:
			return append(out, checkFatal(err)...)
		}
		if line <= last {
			t.Fatalf("line %d after line %d", line, last)
		}
		last = line
		out = append(out, readResult{row: row})
	}
}

// compareLimited checks that a reader with a small record size limit reads
// the same rows as the normal one until it stops with a fatal error.
func compareLimited(t *testing.T, full, limited []readResult) {
	t.Helper()
	for i, r := range limited {
		if r.fatal {
			if !strings.Contains(r.row, "no CSV record ends within") && (i >= len(full) || full[i] != r) {
				t.Fatalf("limited reader failed with %q, normal reader read %+v", r.row, full[min(i, len(full)):])
			}
			return
		}
		if i >= len(full) || full[i] != r {
			t.Fatalf("limited reader read %q at %d, normal reader %+v", r.row, i, full[min(i, len(full)):])
		}
	}
	if len(limited) != len(full) {
		t.Fatalf("limited reader read %d rows, normal reader %d", len(limited), len(full))
	}
}

func FuzzReadTiers(f *testing.F) {
	f.Add(firstLines(f, vectorTiers, 8))
	f.Add(th + "c1,0,0\r\nc1,10,5\r\n")
	f.Add(th + "c1,-1,0\nc1,x,0\n,0,0\nc1,0,10001\nc1,0\n")
	f.Add(th + "c\"1,0,0\nc2,\"0,0\nc3,0,0\n")
	f.Add(th + "c1,9223372036854775807,10000\nc1,9223372036854775808,0\n")
	f.Add("\uFEFF" + th)
	f.Add("contract_id,threshold_minor\n")
	f.Add("")
	f.Add(th + "c\xff,0,0\n\"c1\",\"0\",\"1\"\n")
	f.Fuzz(func(t *testing.T, input string) {
		const file = "t.csv"
		checkRow := func(s string) error {
			var c string
			var th, bp int64
			if _, err := fmt.Sscanf(s, "%q %d %d", &c, &th, &bp); err != nil {
				return err
			}
			if !contractIDPattern.MatchString(c) || th < 0 || bp < 0 || bp > 10000 {
				return errors.New("out of range")
			}
			return nil
		}
		open := func(limit int64) func() (func() (string, int64, error), error) {
			return func() (func() (string, int64, error), error) {
				cf, err := openCSVLimit(strings.NewReader(input), file, tiersColumns, limit)
				if err != nil {
					return nil, err
				}
				r := &TiersReader{f: cf}
				return func() (string, int64, error) {
					row, err := r.Next()
					if row.ContractID != "" && !contractIDPattern.MatchString(row.ContractID) {
						t.Fatalf("row %+v has an invalid contract id", row)
					}
					if err == nil {
						fs := r.Fields()
						if fs[0] != row.ContractID || fs[1] != strconv.FormatInt(row.ThresholdMinor, 10) && !strings.HasPrefix(fs[1], "0") {
							t.Fatalf("fields %q do not match row %+v", fs, row)
						}
					}
					return fmt.Sprintf("%q %d %d", row.ContractID, row.ThresholdMinor, row.DiscountBP), row.Line, err
				}, nil
			}
		}
		full := drain(t, input, file, open(maxRecordBytes), checkRow)
		compareLimited(t, full, drain(t, input, file, open(64), checkRow))
	})
}

func FuzzReadRecords(f *testing.F) {
	f.Add(firstLines(f, vectorRecords, 8))
	f.Add(rh + "c1,r1,1\r\nc1,\"r,\"\"2\"\"\",1000000000000\r\n")
	f.Add(rh + "c1,,1\nc1,a\tb,1\nc1,r,0\nc1,r,1000000000001\nc1,r\n")
	f.Add(rh + "c1,r\xc3,1\nc1,\"a\nb\",1\nc1,r\x00,1\n")
	f.Add(rh + "c1," + strings.Repeat("é", 129) + ",1\n")
	f.Add(rh + "c1,\"unclosed,1\nc1,r2,2\n")
	f.Fuzz(func(t *testing.T, input string) {
		const file = "r.csv"
		checkRow := func(s string) error {
			var c, id string
			var amount int64
			if _, err := fmt.Sscanf(s, "%q %q %d", &c, &id, &amount); err != nil {
				return err
			}
			if !contractIDPattern.MatchString(c) || amount < 1 || amount > 1_000_000_000_000 {
				return errors.New("contract or amount")
			}
			if !utf8.ValidString(id) || id == "" || utf8.RuneCountInString(id) > 128 {
				return errors.New("record_id length or encoding")
			}
			for _, r := range id {
				if !unicode.IsPrint(r) {
					return errors.New("record_id not printable")
				}
			}
			return nil
		}
		open := func(limit int64) func() (func() (string, int64, error), error) {
			return func() (func() (string, int64, error), error) {
				cf, err := openCSVLimit(strings.NewReader(input), file, recordsColumns, limit)
				if err != nil {
					return nil, err
				}
				r := &RecordsReader{f: cf}
				return func() (string, int64, error) {
					row, err := r.Next()
					if row.ContractID != "" && !contractIDPattern.MatchString(row.ContractID) {
						t.Fatalf("row %+v has an invalid contract id", row)
					}
					if err == nil {
						if fs := r.Fields(); fs[0] != row.ContractID || fs[1] != row.RecordID {
							t.Fatalf("fields %q do not match row %+v", fs, row)
						}
					}
					return fmt.Sprintf("%q %q %d", row.ContractID, row.RecordID, row.AmountMinor), row.Line, err
				}, nil
			}
		}
		full := drain(t, input, file, open(maxRecordBytes), checkRow)
		compareLimited(t, full, drain(t, input, file, open(64), checkRow))
	})
}
