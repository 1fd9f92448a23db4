package ingest

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TiersHeader is the header line a tiers file must start with.
const TiersHeader = "contract_id,threshold_minor,discount_bp"

// RecordsHeader is the header line a records file must start with.
const RecordsHeader = "contract_id,record_id,amount_minor"

// Limits of the input rules.
const (
	MaxContractIDLen = 64                // bytes (the allowed characters are ASCII)
	MaxRecordIDLen   = 128               // characters (runes)
	MaxTiers         = 64                // tiers per contract
	MaxDiscountBP    = 10000             // 100%
	MaxAmountMinor   = 1_000_000_000_000 // per record
)

// maxRecordBytes bounds the bytes one CSV record may span. No valid row comes
// near it; it stops an unclosed quote from reading the rest of a large file
// into memory as a single field.
const maxRecordBytes = 1 << 20

var (
	tiersColumns   = strings.Split(TiersHeader, ",")
	recordsColumns = strings.Split(RecordsHeader, ",")
)

// A LineError describes one invalid input row.
type LineError struct {
	File   string   // the file name as given by the user
	Line   int64    // 1-based physical line on which the row starts
	Reason string   // what is wrong, without file and line
	Row    []string // the row's fields as read; nil when the line is not well-formed CSV
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason) }

// InvalidInputError reports input that was refused, and nothing loaded:
// rows that broke the input rules in an all-or-nothing load, or a file that
// cannot be read as a tiers or records file at all (wrong header, empty, a
// CSV record that never ends, or with SkipInvalid a malformed tiers row
// whose contract cannot be told), which fails even a load with SkipInvalid.
type InvalidInputError struct {
	// Errors lists the first problems in file order (tiers before records)
	// and line order, at most Options.MaxListed of them.
	Errors []LineError
	// Total counts every invalid row, listed or not.
	Total int64
}

func (e *InvalidInputError) Error() string {
	if e.Total == 1 && len(e.Errors) == 1 {
		return e.Errors[0].Error() + " (nothing was loaded)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d invalid rows, nothing was loaded:", e.Total)
	for i := range e.Errors {
		b.WriteString("\n  ")
		b.WriteString(e.Errors[i].Error())
	}
	if more := e.Total - int64(len(e.Errors)); more > 0 {
		fmt.Fprintf(&b, "\n  and %d more (%d in total)", more, e.Total)
	}
	return b.String()
}

func fatalInput(file string, line int64, format string, args ...any) *InvalidInputError {
	return &InvalidInputError{Total: 1, Errors: []LineError{{File: file, Line: line, Reason: fmt.Sprintf(format, args...)}}}
}

var errRecordTooLong = errors.New("CSV record too long")

const utf8BOM = "\uFEFF"

// boundedReader fails once more than limit bytes have been read in total.
// The CSV reader moves the limit forward after every record.
type boundedReader struct {
	r        io.Reader
	n, limit int64
	tripped  bool // the limit was hit; the CSV reader's state is now unreliable
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n >= b.limit {
		b.tripped = true
		return 0, errRecordTooLong
	}
	if rem := b.limit - b.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// csvFile reads the records of one CSV input file, with line numbers and
// with constant memory.
type csvFile struct {
	name     string
	src      *boundedReader
	cr       *csv.Reader
	maxBytes int64
	endLine  int64 // last physical line of the last record read
	err      error // sticky: io.EOF or a fatal error
}

// openCSV starts reading r and checks its header.
func openCSV(r io.Reader, name string, header []string) (*csvFile, error) {
	return openCSVLimit(r, name, header, maxRecordBytes)
}

func openCSVLimit(r io.Reader, name string, header []string, maxBytes int64) (*csvFile, error) {
	// A UTF-8 byte order mark (as spreadsheet programs write) is not part
	// of the header: skip it.
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReader(r)
	}
	if b, _ := br.Peek(len(utf8BOM)); string(b) == utf8BOM {
		_, _ = br.Discard(len(utf8BOM))
	}
	src := &boundedReader{r: br, limit: maxBytes}
	cr := csv.NewReader(src)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	f := &csvFile{name: name, src: src, cr: cr, maxBytes: maxBytes}
	want := strings.Join(header, ",")
	fields, line, err := f.next()
	switch {
	case err == io.EOF:
		return nil, fatalInput(name, 1, "file is empty, want the header %q", want)
	case err != nil:
		var le *LineError
		if errors.As(err, &le) {
			return nil, fatalInput(name, le.Line, "bad header: %s", le.Reason)
		}
		return nil, err
	}
	if !slices.Equal(fields, header) {
		return nil, fatalInput(name, line, "header is %s, want %q", quote(joinCSV(fields)), want)
	}
	return f, nil
}

// next returns the fields and starting line of the next record. A record
// that is not well-formed CSV gives a *LineError, after which reading goes
// on with the next line; the fields returned with it are those completed
// before the error if the record is one line, else none. At the end it
// returns io.EOF; any other error is fatal and returned again by every
// later call.
func (f *csvFile) next() ([]string, int64, error) {
	if f.err != nil {
		return nil, 0, f.err
	}
	fields, err := f.cr.Read()
	if f.src.tripped {
		// Whatever the CSV reader made of the cut-off input (possibly a
		// parse error), the record is too long and the line count is off.
		err = errRecordTooLong
	}
	if err == nil {
		line, _ := f.cr.FieldPos(0)
		last, _ := f.cr.FieldPos(len(fields) - 1)
		f.endLine = int64(last) + int64(strings.Count(fields[len(fields)-1], "\n"))
		f.src.limit = f.cr.InputOffset() + f.maxBytes
		return fields, int64(line), nil
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		f.endLine = int64(pe.Line)
		f.src.limit = f.cr.InputOffset() + f.maxBytes
		where := fmt.Sprintf("column %d", pe.Column)
		if pe.Line != pe.StartLine {
			where = fmt.Sprintf("line %d, column %d", pe.Line, pe.Column)
		}
		// The fields completed before the error, if the record is one line.
		if pe.Line != pe.StartLine {
			fields = nil
		}
		return fields, int64(pe.StartLine), &LineError{File: f.name, Line: int64(pe.StartLine),
			Reason: fmt.Sprintf("malformed CSV: %v (at %s)", pe.Err, where)}
	}
	switch {
	case err == io.EOF:
		f.err = io.EOF
	case errors.Is(err, errRecordTooLong):
		f.err = fatalInput(f.name, f.endLine+1,
			"no CSV record ends within %d bytes from here; is a quote left open?", f.maxBytes)
	default:
		f.err = fmt.Errorf("reading %s: %w", f.name, err)
	}
	return nil, 0, f.err
}

func (f *csvFile) rowError(line int64, fields []string, format string, args ...any) *LineError {
	return &LineError{File: f.name, Line: line, Reason: fmt.Sprintf(format, args...), Row: slices.Clone(fields)}
}

// checkShape checks the field count and encoding of a row.
func (f *csvFile) checkShape(line int64, fields, columns []string) *LineError {
	if len(fields) != len(columns) {
		return f.rowError(line, fields, "has %d fields, want %d (%s)", len(fields), len(columns), strings.Join(columns, ","))
	}
	for i, s := range fields {
		if !utf8.ValidString(s) {
			return f.rowError(line, fields, "%s is not valid UTF-8", columns[i])
		}
	}
	return nil
}

// TierRow is one row of a tiers file.
type TierRow struct {
	Line           int64 // physical line the row starts on
	ContractID     string
	ThresholdMinor int64
	DiscountBP     int64
}

// TiersReader streams the rows of a tiers file.
type TiersReader struct {
	f      *csvFile
	fields []string
}

// NewTiersReader starts reading a tiers file and checks its header. file
// names the input in errors. A bad header or an empty file gives an
// *InvalidInputError.
func NewTiersReader(r io.Reader, file string) (*TiersReader, error) {
	f, err := openCSV(r, file, tiersColumns)
	if err != nil {
		return nil, err
	}
	return &TiersReader{f: f}, nil
}

// Next returns the next row. A *LineError means the row is invalid and
// reading may go on; the row then has its Line, and its ContractID if the
// row's first field is a valid contract id (for a malformed CSV record only
// if it is one line, as it may have swallowed the lines after it), so that
// the contract's tier set can be rejected as incomplete. Next returns
// io.EOF after the last row; any other error ends the file (an
// *InvalidInputError when the file is not readable as CSV).
func (r *TiersReader) Next() (TierRow, error) {
	fields, line, err := r.f.next()
	row := TierRow{Line: line, ContractID: validContractID(fields)}
	if err != nil {
		r.fields = nil
		return row, err
	}
	r.fields = fields
	if le := r.f.checkShape(line, fields, tiersColumns); le != nil {
		return row, le
	}
	if reason := checkContractID(fields[0]); reason != "" {
		return row, r.f.rowError(line, fields, "%s", reason)
	}
	var reason string
	if row.ThresholdMinor, reason = parseInt("threshold_minor", fields[1], 0, 1<<63-1, "must be ≥ 0"); reason != "" {
		return row, r.f.rowError(line, fields, "%s", reason)
	}
	if row.DiscountBP, reason = parseInt("discount_bp", fields[2], 0, MaxDiscountBP, "must be 0 to 10000"); reason != "" {
		return row, r.f.rowError(line, fields, "%s", reason)
	}
	return row, nil
}

// validContractID returns the first field if it is a valid contract id.
func validContractID(fields []string) string {
	if len(fields) > 0 && checkContractID(fields[0]) == "" {
		return fields[0]
	}
	return ""
}

// Fields returns the raw fields of the row last returned by Next, valid
// until the next call (nil after a malformed CSV record).
func (r *TiersReader) Fields() []string { return r.fields }

// RecordRow is one row of a records file.
type RecordRow struct {
	Line        int64 // physical line the row starts on
	ContractID  string
	RecordID    string
	AmountMinor int64
}

// RecordsReader streams the rows of a records file.
type RecordsReader struct {
	f      *csvFile
	fields []string
}

// NewRecordsReader starts reading a records file and checks its header. file
// names the input in errors. A bad header or an empty file gives an
// *InvalidInputError.
func NewRecordsReader(r io.Reader, file string) (*RecordsReader, error) {
	f, err := openCSV(r, file, recordsColumns)
	if err != nil {
		return nil, err
	}
	return &RecordsReader{f: f}, nil
}

// Next returns the next row, with the same error contract as
// TiersReader.Next. The checks here are those of a single row; uniqueness,
// known contracts and totals are checked by Load.
func (r *RecordsReader) Next() (RecordRow, error) {
	fields, line, err := r.f.next()
	r.fields = fields
	if err != nil {
		r.fields = nil
	}
	return r.check(fields, line, err)
}

// check applies the single-row checks to what csvFile.next returned for a
// row. It reads only the file's name from r, so it may run beside the
// reading of later rows.
func (r *RecordsReader) check(fields []string, line int64, err error) (RecordRow, error) {
	row := RecordRow{Line: line, ContractID: validContractID(fields)}
	if err != nil {
		return row, err
	}
	if le := r.f.checkShape(line, fields, recordsColumns); le != nil {
		return row, le
	}
	if reason := checkContractID(fields[0]); reason != "" {
		return row, r.f.rowError(line, fields, "%s", reason)
	}
	if reason := checkRecordID(fields[1]); reason != "" {
		return row, r.f.rowError(line, fields, "%s", reason)
	}
	row.RecordID = fields[1]
	var reason string
	if row.AmountMinor, reason = parseInt("amount_minor", fields[2], 1, MaxAmountMinor, "must be 1 to 1000000000000"); reason != "" {
		return row, r.f.rowError(line, fields, "%s", reason)
	}
	return row, nil
}

// Fields returns the raw fields of the row last returned by Next, valid
// until the next call (nil after a malformed CSV record).
func (r *RecordsReader) Fields() []string { return r.fields }

func checkContractID(s string) string {
	if s == "" {
		return "contract_id is empty"
	}
	for i := 0; i < len(s); i++ {
		if !contractIDByte(s[i]) {
			return fmt.Sprintf("contract_id %s has a character outside A-Z a-z 0-9 . _ : -", quote(s))
		}
	}
	if len(s) > MaxContractIDLen {
		return fmt.Sprintf("contract_id %s is %d characters long, at most %d are allowed", quote(s), len(s), MaxContractIDLen)
	}
	return ""
}

func contractIDByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

// checkRecordID checks a record id that is known to be valid UTF-8.
func checkRecordID(s string) string {
	if s == "" {
		return "record_id is empty"
	}
	n := 0
	for _, c := range s {
		n++
		if !unicode.IsPrint(c) {
			return fmt.Sprintf("record_id %s has a non-printable character %U at position %d", quote(s), c, n)
		}
	}
	if n > MaxRecordIDLen {
		return fmt.Sprintf("record_id %s is %d characters long, at most %d are allowed", quote(s), n, MaxRecordIDLen)
	}
	return ""
}

// parseInt parses a plain decimal integer (ASCII digits with an optional
// leading minus sign; no plus sign, spaces or underscores) in [lo, hi]. A
// minus sign is out of range when lo ≥ 0, even on zero.
func parseInt(name, s string, lo, hi int64, rule string) (int64, string) {
	if s == "" {
		return 0, name + " is empty"
	}
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || strings.IndexFunc(digits, func(c rune) bool { return c < '0' || c > '9' }) >= 0 {
		return 0, fmt.Sprintf("%s %s is not an integer", name, quote(s))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		if len(digits) < len(s) {
			return 0, fmt.Sprintf("%s %s is below the 64-bit integer range (%s)", name, truncate(s), rule)
		}
		return 0, fmt.Sprintf("%s %s overflows a 64-bit integer (%s)", name, truncate(s), rule)
	}
	if err != nil || v < lo || v > hi || lo >= 0 && len(digits) < len(s) { // also "-0"
		return 0, fmt.Sprintf("%s %s is out of range (%s)", name, truncate(s), rule)
	}
	return v, ""
}

// canonicalInt reports whether s is written as strconv.FormatInt would
// write it, so that it can be reconstructed from its value.
func canonicalInt(s string) bool { return len(s) == 1 || s[0] != '0' }

// quote quotes s for an error message, shortening long values.
func quote(s string) string { return strconv.Quote(truncate(s)) }

func truncate(s string) string {
	const max = 48
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// joinCSV writes fields as one CSV line without the line end.
func joinCSV(fields []string) string {
	var b strings.Builder
	w := csv.NewWriter(&b)
	_ = w.Write(fields) // writing to a strings.Builder cannot fail
	w.Flush()
	return strings.TrimSuffix(b.String(), "\n")
}
