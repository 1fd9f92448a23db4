package ingest

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/internal/dbconn"
)

// loadLockKey identifies the load lock among advisory locks ("baton-ld" as
// a 64-bit integer).
const loadLockKey int64 = 0x626174_6f6e2d6c64

// WorkChannel is the notification channel a load signals on when it has
// added records, so that idle workers wake up.
const WorkChannel = "baton_work"

// DefaultMaxListed is the number of problems an *InvalidInputError lists
// when Options.MaxListed is zero.
const DefaultMaxListed = 20

const progressEvery = 100_000

// Options say what to load and how to treat invalid rows.
type Options struct {
	// TiersPath and RecordsPath name the input files; give either or both.
	// Tiers are applied first, so records may refer to contracts that the
	// same load creates.
	TiersPath   string
	RecordsPath string
	// SkipInvalid loads the valid rows and writes every rejected row to
	// RejectPath. Without it a load is all-or-nothing: one invalid row and
	// nothing is loaded.
	SkipInvalid bool
	// RejectPath receives the rejected rows as CSV with the header
	// file,line,reason,row. It is required with SkipInvalid and only
	// allowed with it. It is written only if the load commits.
	RejectPath string
	// MaxListed caps the problems listed in an *InvalidInputError.
	// Zero means DefaultMaxListed.
	MaxListed int
	// Progress, if set, is called about every 100,000 rows read from an
	// input file, and once more at its end, with the stage ("tiers" or
	// "records") and the rows read so far.
	Progress func(stage string, rows int64)

	// maxGross is the limit on a contract's cumulative gross; zero means
	// math.MaxInt64. Tests lower it.
	maxGross int64
}

func (o Options) validate() error {
	switch {
	case o.TiersPath == "" && o.RecordsPath == "":
		return errors.New("nothing to load: give a tiers file, a records file or both")
	case o.SkipInvalid && o.RejectPath == "":
		return errors.New("skipping invalid rows needs a reject file to write them to")
	case !o.SkipInvalid && o.RejectPath != "":
		return errors.New("a reject file is only written when skipping invalid rows")
	case o.MaxListed < 0:
		return fmt.Errorf("MaxListed is %d, want ≥ 0", o.MaxListed)
	case o.RejectPath != "" && (sameFile(o.RejectPath, o.TiersPath) || sameFile(o.RejectPath, o.RecordsPath)):
		return fmt.Errorf("the reject file %s is also an input file", o.RejectPath)
	case o.TiersPath != "" && sameFile(o.TiersPath, o.RecordsPath):
		return fmt.Errorf("%s is given both as the tiers and as the records file", o.TiersPath)
	}
	return nil
}

func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}

// Report describes a load.
type Report struct {
	LoadID             int64 // loads.load_id; records.load_id of the records added
	TierRows           int64 // valid tier rows (including unchanged re-deliveries of a tier set)
	ContractsCreated   int64 // contracts new to the database
	RecordsAccepted    int64 // records added
	RecordsRedelivered int64 // records skipped as identical to one stored or earlier in the file
	RowsRejected       int64 // invalid rows of both files
	Duration           time.Duration
}

// Load loads a tiers file, a records file or both in one transaction. See
// the package documentation for the rules and the transaction.
//
// If rows are invalid and opts.SkipInvalid is false, nothing is loaded and
// the error is an *InvalidInputError listing them. A file that is not a
// tiers or records file at all (header, empty, unreadable CSV) fails the load
// with an *InvalidInputError even with SkipInvalid.
func Load(ctx context.Context, db *bun.DB, opts Options) (Report, error) {
	start := time.Now()
	if err := opts.validate(); err != nil {
		return Report{}, fmt.Errorf("loading: %w", err)
	}
	if opts.MaxListed == 0 {
		opts.MaxListed = DefaultMaxListed
	}
	if opts.maxGross == 0 {
		opts.maxGross = math.MaxInt64
	}
	l := &loader{opts: opts}

	// Open the inputs and check their headers before touching the database.
	if opts.TiersPath != "" {
		f, err := os.Open(opts.TiersPath)
		if err != nil {
			return Report{}, fmt.Errorf("loading tiers: %w", err)
		}
		defer f.Close()
		if l.tiers, err = NewTiersReader(bufio.NewReaderSize(f, 1<<16), opts.TiersPath); err != nil {
			return Report{}, wrapInput("loading tiers from "+opts.TiersPath, err)
		}
	}
	if opts.RecordsPath != "" {
		f, err := os.Open(opts.RecordsPath)
		if err != nil {
			return Report{}, fmt.Errorf("loading records: %w", err)
		}
		defer f.Close()
		if l.records, err = NewRecordsReader(bufio.NewReaderSize(f, 1<<16), opts.RecordsPath); err != nil {
			return Report{}, wrapInput("loading records from "+opts.RecordsPath, err)
		}
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("loading: acquiring a database connection: %w", err)
	}
	defer conn.Close()
	var rep Report
	err = dbconn.Raw(conn.Conn, func(pc *pgx.Conn) error {
		var err error
		rep, err = l.run(ctx, pc)
		return err
	})
	rep.Duration = time.Since(start)
	return rep, err
}

// wrapInput leaves an *InvalidInputError as it is (its lines name the file)
// and wraps anything else.
func wrapInput(doing string, err error) error {
	var ie *InvalidInputError
	if errors.As(err, &ie) {
		return err
	}
	return fmt.Errorf("%s: %w", doing, err)
}

type loader struct {
	opts    Options
	tiers   *TiersReader
	records *RecordsReader
	rep     Report
}

// statement runs one step of the load, naming it in any error.
func exec(ctx context.Context, tx pgx.Tx, doing, sql string, args ...any) (int64, error) {
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", doing, err)
	}
	return tag.RowsAffected(), nil
}

func (l *loader) run(ctx context.Context, conn *pgx.Conn) (Report, error) {
	rep := &l.rep
	tx, err := conn.Begin(ctx)
	if err != nil {
		return *rep, fmt.Errorf("loading: starting the transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	if _, err := exec(ctx, tx, "loading: waiting for other loads to finish",
		"SELECT pg_advisory_xact_lock($1)", loadLockKey); err != nil {
		return *rep, err
	}
	if err := tx.QueryRow(ctx, `INSERT INTO loads (tiers_file, records_file) VALUES ($1, $2) RETURNING load_id`,
		nullIfEmpty(l.opts.TiersPath), nullIfEmpty(l.opts.RecordsPath)).Scan(&rep.LoadID); err != nil {
		return *rep, fmt.Errorf("loading: recording the load: %w", err)
	}
	if _, err := exec(ctx, tx, "loading: creating staging tables", sqlCreateStaging); err != nil {
		return *rep, err
	}

	if l.tiers != nil {
		if err := l.stageTiers(ctx, tx); err != nil {
			return *rep, wrapInput("loading tiers from "+l.opts.TiersPath, err)
		}
	}
	if l.records != nil {
		if err := l.stageRecords(ctx, tx); err != nil {
			return *rep, wrapInput("loading records from "+l.opts.RecordsPath, err)
		}
	}

	if err := tx.QueryRow(ctx, sqlCountRejected).Scan(&rep.RowsRejected); err != nil {
		return *rep, fmt.Errorf("loading: counting invalid rows: %w", err)
	}
	if rep.RowsRejected > 0 && !l.opts.SkipInvalid {
		ie, err := l.listErrors(ctx, tx)
		if err != nil {
			return *rep, err
		}
		return *rep, ie
	}
	var rejectTmp string
	if l.opts.SkipInvalid {
		if rejectTmp, err = l.writeRejects(ctx, tx); err != nil {
			return *rep, err
		}
		defer func() {
			if rejectTmp != "" {
				os.Remove(rejectTmp)
			}
		}()
	}

	if l.records != nil {
		if err := l.insertRecords(ctx, tx); err != nil {
			return *rep, fmt.Errorf("loading records from %s: %w", l.opts.RecordsPath, err)
		}
	}
	if err := l.finish(ctx, tx); err != nil {
		return *rep, err
	}
	if err := tx.Commit(ctx); err != nil {
		return *rep, fmt.Errorf("loading: committing: %w", err)
	}
	if rejectTmp != "" {
		if err := os.Rename(rejectTmp, l.opts.RejectPath); err != nil {
			return *rep, fmt.Errorf("load %d committed, but writing the reject file: %w", rep.LoadID, err)
		}
		rejectTmp = ""
	}
	return *rep, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Staging tables live until the end of the transaction. Rows keep their
// line numbers; err is set for an invalid row (the first problem found);
// raw holds the original fields as CSV when they cannot be rebuilt from the
// typed columns (invalid rows, integers written with leading zeros).
const sqlCreateStaging = `
CREATE TEMP TABLE load_tiers (
    line            bigint NOT NULL,
    contract_id     text COLLATE "C",
    threshold_minor bigint,
    discount_bp     bigint,
    raw             text,
    err             text
) ON COMMIT DROP;
CREATE TEMP TABLE load_records (
    line         bigint NOT NULL,
    contract_id  text COLLATE "C",
    record_id    text COLLATE "C",
    amount_minor bigint,
    raw          text,
    err          text,
    redelivered  boolean NOT NULL DEFAULT false,
    first_line   bigint
) ON COMMIT DROP;
CREATE TEMP TABLE load_tier_sets (
    contract_id text COLLATE "C" NOT NULL,
    existed     boolean NOT NULL,
    changed     boolean NOT NULL,
    position    bigint NOT NULL
) ON COMMIT DROP;`

// rowSource feeds parsed rows to CopyFrom, one staging row per input row.
type rowSource struct {
	next     func(vals []any) (bool, error) // fills vals; false at the end
	vals     []any
	err      error
	n        int64
	stage    string
	progress func(string, int64)
}

func (s *rowSource) Next() bool {
	more, err := s.next(s.vals)
	if err != nil {
		s.err = err
		return false
	}
	if !more {
		if s.progress != nil {
			s.progress(s.stage, s.n)
		}
		return false
	}
	s.n++
	if s.progress != nil && s.n%progressEvery == 0 {
		s.progress(s.stage, s.n)
	}
	return true
}

func (s *rowSource) Values() ([]any, error) { return s.vals, nil }
func (s *rowSource) Err() error             { return s.err }

func (l *loader) copyIn(ctx context.Context, tx pgx.Tx, table string, cols []string, src *rowSource) error {
	src.vals = make([]any, len(cols))
	src.progress = l.opts.Progress
	_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, src)
	if src.err != nil {
		return src.err // the input's own error, not pgx's wrapping of it
	}
	if err != nil {
		return fmt.Errorf("copying rows to the database: %w", err)
	}
	if _, err := tx.Exec(ctx, "ANALYZE "+table); err != nil {
		return fmt.Errorf("analyzing staged rows: %w", err)
	}
	return nil
}

// rawRow gives the value of a staging row's raw column.
func rawRow(fields []string) string {
	return sanitize(joinCSV(fields))
}

// sanitize makes s storable as PostgreSQL text: valid UTF-8 without NUL.
func sanitize(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func (l *loader) stageTiers(ctx context.Context, tx pgx.Tx) error {
	src := &rowSource{stage: "tiers", next: func(v []any) (bool, error) {
		row, err := l.tiers.Next()
		if err == io.EOF {
			return false, nil
		}
		var le *LineError
		switch {
		case err == nil:
			v[0], v[1], v[2], v[3], v[4], v[5] = row.Line, row.ContractID, row.ThresholdMinor, row.DiscountBP, nil, nil
			if f := l.tiers.Fields(); !canonicalInt(f[1]) || !canonicalInt(f[2]) {
				v[4] = rawRow(f)
			}
		case errors.As(err, &le):
			v[0], v[1], v[2], v[3], v[4], v[5] = le.Line, nullIfEmpty(row.ContractID), nil, nil, rawRow(le.Row), sanitize(le.Reason)
		default:
			return false, err
		}
		return true, nil
	}}
	if err := l.copyIn(ctx, tx, "load_tiers",
		[]string{"line", "contract_id", "threshold_minor", "discount_bp", "raw", "err"}, src); err != nil {
		return err
	}
	steps := []struct {
		doing, sql string
		args       []any
	}{
		{"checking for duplicate thresholds", sqlTierDuplicates, nil},
		{"checking tier counts", sqlTierTooMany, []any{MaxTiers}},
		{"rejecting incomplete tier sets", sqlTierSetRejected, nil},
		{"comparing with stored tier sets", sqlTierSets, nil},
		{"checking for priced contracts", sqlTierFrozen, nil},
		{"checking for priced contracts", sqlTierSetsDropRejected, nil},
	}
	for _, s := range steps {
		if _, err := exec(ctx, tx, s.doing, s.sql, s.args...); err != nil {
			return err
		}
	}
	n, err := exec(ctx, tx, "creating contracts", sqlInsertContracts)
	if err != nil {
		return err
	}
	l.rep.ContractsCreated = n
	for _, s := range []struct{ doing, sql string }{
		{"creating task rows", sqlInsertTierTasks},
		{"removing replaced tiers", sqlDeleteChangedTiers},
		{"storing tiers", sqlInsertTiers},
	} {
		if _, err := exec(ctx, tx, s.doing, s.sql); err != nil {
			return err
		}
	}
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM load_tiers WHERE err IS NULL").Scan(&l.rep.TierRows); err != nil {
		return fmt.Errorf("counting tier rows: %w", err)
	}
	return nil
}

const sqlTierDuplicates = `
UPDATE load_tiers t
   SET err = format('duplicate threshold_minor %s for contract %s (first on line %s)',
                    t.threshold_minor, t.contract_id, d.first_line)
  FROM (SELECT line, min(line) OVER (PARTITION BY contract_id, threshold_minor) AS first_line
          FROM load_tiers WHERE err IS NULL) d
 WHERE t.line = d.line AND d.first_line <> d.line`

const sqlTierTooMany = `
UPDATE load_tiers t
   SET err = format('contract %s has %s tier rows, at most %s are allowed', t.contract_id, c.n, $1::int)
  FROM (SELECT contract_id, count(*) AS n FROM load_tiers
         WHERE contract_id IS NOT NULL GROUP BY contract_id HAVING count(*) > $1::int) c
 WHERE t.contract_id = c.contract_id AND t.err IS NULL`

const sqlTierSetRejected = `
UPDATE load_tiers t
   SET err = format('tier set of contract %s is rejected because line %s is invalid', t.contract_id, b.first_bad)
  FROM (SELECT contract_id, min(line) AS first_bad FROM load_tiers
         WHERE err IS NOT NULL AND contract_id IS NOT NULL GROUP BY contract_id) b
 WHERE t.contract_id = b.contract_id AND t.err IS NULL`

// Every valid tier set, whether its contract exists, whether the set
// differs from the stored one, and the contract's position as of now. The
// position is checked again under the task row lock before commit.
const sqlTierSets = `
INSERT INTO load_tier_sets (contract_id, existed, changed, position)
WITH new AS (
    SELECT contract_id,
           array_agg(threshold_minor ORDER BY threshold_minor) AS th,
           array_agg(discount_bp ORDER BY threshold_minor) AS bp
      FROM load_tiers WHERE err IS NULL GROUP BY contract_id
), old AS (
    SELECT contract_id,
           array_agg(threshold_minor ORDER BY threshold_minor) AS th,
           array_agg(discount_bp::bigint ORDER BY threshold_minor) AS bp
      FROM tiers WHERE contract_id IN (SELECT contract_id FROM new) GROUP BY contract_id
)
SELECT n.contract_id, c.contract_id IS NOT NULL,
       o.th IS DISTINCT FROM n.th OR o.bp IS DISTINCT FROM n.bp,
       coalesce(k.position, 0)
  FROM new n
  LEFT JOIN contracts c ON c.contract_id = n.contract_id
  LEFT JOIN old o ON o.contract_id = n.contract_id
  LEFT JOIN tasks k ON k.partition_key = n.contract_id`

const sqlTierFrozen = `
UPDATE load_tiers t
   SET err = format('tiers of contract %s cannot change: %s of its records are already priced', s.contract_id, s.position)
  FROM load_tier_sets s
 WHERE s.contract_id = t.contract_id AND s.existed AND s.changed AND s.position > 0 AND t.err IS NULL`

const sqlTierSetsDropRejected = `DELETE FROM load_tier_sets WHERE existed AND changed AND position > 0`

const sqlInsertContracts = `
INSERT INTO contracts (contract_id)
SELECT contract_id FROM load_tier_sets WHERE NOT existed ORDER BY contract_id
ON CONFLICT DO NOTHING`

// Existing conflicting rows are not locked by ON CONFLICT DO NOTHING.
const sqlInsertTierTasks = `
INSERT INTO tasks (partition_key)
SELECT contract_id FROM load_tier_sets ORDER BY contract_id
ON CONFLICT DO NOTHING`

const sqlDeleteChangedTiers = `
DELETE FROM tiers WHERE contract_id IN (SELECT contract_id FROM load_tier_sets WHERE existed AND changed)`

const sqlInsertTiers = `
INSERT INTO tiers (contract_id, threshold_minor, discount_bp)
SELECT t.contract_id, t.threshold_minor, t.discount_bp
  FROM load_tiers t JOIN load_tier_sets s ON s.contract_id = t.contract_id
 WHERE s.changed AND t.err IS NULL
 ORDER BY t.contract_id, t.threshold_minor`

func (l *loader) stageRecords(ctx context.Context, tx pgx.Tx) error {
	src := &rowSource{stage: "records", next: func(v []any) (bool, error) {
		row, err := l.records.Next()
		if err == io.EOF {
			return false, nil
		}
		var le *LineError
		switch {
		case err == nil:
			v[0], v[1], v[2], v[3], v[4], v[5] = row.Line, row.ContractID, row.RecordID, row.AmountMinor, nil, nil
			if f := l.records.Fields(); !canonicalInt(f[2]) {
				v[4] = rawRow(f)
			}
		case errors.As(err, &le):
			v[0], v[1], v[2], v[3], v[4], v[5] = le.Line, nil, nil, nil, rawRow(le.Row), sanitize(le.Reason)
		default:
			return false, err
		}
		return true, nil
	}}
	if err := l.copyIn(ctx, tx, "load_records",
		[]string{"line", "contract_id", "record_id", "amount_minor", "raw", "err"}, src); err != nil {
		return err
	}
	if _, err := exec(ctx, tx, "checking contracts", sqlRecordUnknownContract, l.opts.TiersPath); err != nil {
		return err
	}
	if _, err := exec(ctx, tx, "comparing with stored records", sqlRecordStored); err != nil {
		return err
	}
	n, err := exec(ctx, tx, "finding repeated record ids", sqlRecordDups)
	if err != nil {
		return err
	}
	if n > 0 {
		if _, err := exec(ctx, tx, "checking repeated record ids", sqlRecordDupsMark); err != nil {
			return err
		}
	}
	n, err = exec(ctx, tx, "checking cumulative gross", sqlRecordGross, l.opts.maxGross, MaxAmountMinor)
	if err != nil {
		return err
	}
	if n > 0 {
		n, err := exec(ctx, tx, "checking cumulative gross", sqlRecordGrossMark, l.opts.maxGross)
		if err != nil {
			return err
		}
		if n > 0 {
			if _, err := exec(ctx, tx, "checking repeated record ids", sqlRecordDupOfRejected); err != nil {
				return err
			}
		}
	}
	return nil
}

const sqlRecordUnknownContract = `
UPDATE load_records r
   SET err = CASE WHEN EXISTS (SELECT 1 FROM load_tiers t WHERE t.contract_id = r.contract_id)
                  THEN format('unknown contract %s (its tier set in %s was rejected)', r.contract_id, $1::text)
                  ELSE format('unknown contract %s', r.contract_id) END
 WHERE r.err IS NULL AND NOT EXISTS (SELECT 1 FROM contracts c WHERE c.contract_id = r.contract_id)`

// A record id already stored: the same amount is a re-delivery, another
// amount an error.
const sqlRecordStored = `
UPDATE load_records r
   SET redelivered = x.amount_minor = r.amount_minor,
       err = CASE WHEN x.amount_minor <> r.amount_minor THEN
             format('record_id %s of contract %s has amount_minor %s, but load %s%s stored it with amount_minor %s',
                    to_json(r.record_id::text), r.contract_id, r.amount_minor, x.load_id,
                    coalesce(' (' || l.records_file || ')', ''), x.amount_minor) END
  FROM records x LEFT JOIN loads l ON l.load_id = x.load_id
 WHERE r.err IS NULL AND x.contract_id = r.contract_id AND x.record_id = r.record_id`

// Later occurrences of a record id within the file, with the line and
// amount of its first valid occurrence.
const sqlRecordDups = `
CREATE TEMP TABLE load_dups ON COMMIT DROP AS
SELECT line, first_line, first_amount FROM (
    SELECT line, first_value(line) OVER w AS first_line, first_value(amount_minor) OVER w AS first_amount
      FROM load_records WHERE err IS NULL AND NOT redelivered
    WINDOW w AS (PARTITION BY contract_id, record_id ORDER BY line)
) d WHERE line <> first_line`

const sqlRecordDupsMark = `
UPDATE load_records r
   SET first_line = d.first_line,
       redelivered = d.first_amount = r.amount_minor,
       err = CASE WHEN d.first_amount <> r.amount_minor THEN
             format('record_id %s of contract %s has amount_minor %s here but %s on line %s',
                    to_json(r.record_id::text), r.contract_id, r.amount_minor, d.first_amount, d.first_line) END
  FROM load_dups d WHERE d.line = r.line`

// Contracts whose cumulative gross might pass the limit: each record is at
// most $2, so only a contract with more than $1/$2 records can, and only
// those have their stored gross summed.
const sqlRecordGross = `
CREATE TEMP TABLE load_gross ON COMMIT DROP AS
SELECT n.contract_id,
       coalesce((SELECT sum(x.amount_minor) FROM records x WHERE x.contract_id = n.contract_id), 0) AS stored
  FROM (SELECT contract_id, count(*) AS cnt FROM load_records
         WHERE err IS NULL AND NOT redelivered GROUP BY contract_id) n
  LEFT JOIN tasks t ON t.partition_key = n.contract_id
 WHERE (coalesce(t.available, 0) + n.cnt)::numeric * $2::bigint > $1::bigint`

// Rejects the records from the one that takes the cumulative gross past the
// limit onwards.
const sqlRecordGrossMark = `
UPDATE load_records r
   SET err = format('cumulative gross of contract %s would exceed %s', r.contract_id, $1::bigint)
  FROM (SELECT l.line, g.stored + sum(l.amount_minor) OVER (PARTITION BY l.contract_id ORDER BY l.line) AS running
          FROM load_records l JOIN load_gross g ON g.contract_id = l.contract_id
         WHERE l.err IS NULL AND NOT l.redelivered) w
 WHERE w.line = r.line AND w.running > $1::bigint`

const sqlRecordDupOfRejected = `
UPDATE load_records r
   SET redelivered = false, err = format('same record as line %s, which is rejected', r.first_line)
  FROM load_records f
 WHERE r.first_line IS NOT NULL AND r.err IS NULL AND f.line = r.first_line AND f.err IS NOT NULL`

const sqlCountRejected = `
SELECT (SELECT count(*) FROM load_tiers WHERE err IS NOT NULL) + (SELECT count(*) FROM load_records WHERE err IS NOT NULL)`

// sqlRejected lists the invalid rows, tiers first, in line order; c1..c3
// rebuild the row when raw is NULL.
const sqlRejected = `
SELECT f, line, err, raw, c1, c2, c3 FROM (
    SELECT 0 AS f, line, err, raw, contract_id AS c1, threshold_minor::text AS c2, discount_bp::text AS c3
      FROM load_tiers WHERE err IS NOT NULL
    UNION ALL
    SELECT 1, line, err, raw, contract_id, record_id, amount_minor::text
      FROM load_records WHERE err IS NOT NULL
) e ORDER BY f, line`

// rejected is one row of sqlRejected.
type rejected struct {
	file   int
	line   int64
	reason string
	raw    *string
	c      [3]*string
}

func (r *rejected) scan(rows pgx.Rows) error {
	return rows.Scan(&r.file, &r.line, &r.reason, &r.raw, &r.c[0], &r.c[1], &r.c[2])
}

// row returns the original row as CSV.
func (r *rejected) row() string {
	if r.raw != nil {
		return *r.raw
	}
	fields := make([]string, 3)
	for i, p := range r.c {
		if p != nil {
			fields[i] = *p
		}
	}
	return joinCSV(fields)
}

func (l *loader) fileName(f int) string {
	if f == 0 {
		return l.opts.TiersPath
	}
	return l.opts.RecordsPath
}

func (l *loader) listErrors(ctx context.Context, tx pgx.Tx) (*InvalidInputError, error) {
	ie := &InvalidInputError{Total: l.rep.RowsRejected}
	rows, err := tx.Query(ctx, sqlRejected+" LIMIT $1", l.opts.MaxListed)
	if err != nil {
		return nil, fmt.Errorf("loading: listing invalid rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var r rejected
		if err := r.scan(rows); err != nil {
			return nil, fmt.Errorf("loading: listing invalid rows: %w", err)
		}
		fields, _ := csv.NewReader(strings.NewReader(r.row())).Read()
		ie.Errors = append(ie.Errors, LineError{File: l.fileName(r.file), Line: r.line, Reason: r.reason, Row: fields})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading: listing invalid rows: %w", err)
	}
	return ie, nil
}

// writeRejects writes the reject file under a temporary name next to
// RejectPath and returns that name; it is renamed once the load commits.
func (l *loader) writeRejects(ctx context.Context, tx pgx.Tx) (string, error) {
	path := l.opts.RejectPath
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("writing reject file: %w", err)
	}
	tmp := f.Name()
	if err := l.writeRejectRows(ctx, tx, f); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("writing reject file %s: %w", path, err)
	}
	return tmp, nil
}

func (l *loader) writeRejectRows(ctx context.Context, tx pgx.Tx, f *os.File) error {
	bw := bufio.NewWriterSize(f, 1<<16)
	w := csv.NewWriter(bw)
	if err := w.Write([]string{"file", "line", "reason", "row"}); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, sqlRejected)
	if err != nil {
		return err
	}
	defer rows.Close()
	rec := make([]string, 4)
	for rows.Next() {
		var r rejected
		if err := r.scan(rows); err != nil {
			return err
		}
		rec[0], rec[1], rec[2], rec[3] = l.fileName(r.file), strconv.FormatInt(r.line, 10), r.reason, r.row()
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// sqlAffected collects the contracts whose task rows the load changes or
// whose position it must check: those gaining records (n_new > 0) and
// existing ones whose tiers change. base is tasks.available before the load.
const sqlAffected = `
CREATE TEMP TABLE load_affected ON COMMIT DROP AS
SELECT contract_id, sum(n_new)::bigint AS n_new, bool_or(tiers_changed) AS tiers_changed, NULL::bigint AS base
  FROM (SELECT contract_id, count(*) AS n_new, false AS tiers_changed
          FROM load_records WHERE err IS NULL AND NOT redelivered GROUP BY contract_id
        UNION ALL
        SELECT contract_id, 0, true FROM load_tier_sets WHERE existed AND changed) u
 GROUP BY contract_id`

const sqlRecordTasks = `
INSERT INTO tasks (partition_key)
SELECT contract_id FROM load_affected WHERE n_new > 0 ORDER BY contract_id
ON CONFLICT DO NOTHING`

// Loads are serialised by the advisory lock and only loads raise
// available, so this plain read stays true until commit (checked again
// under the row locks).
const sqlBase = `
UPDATE load_affected a SET base = t.available FROM tasks t WHERE t.partition_key = a.contract_id`

const sqlInsertRecords = `
INSERT INTO records (contract_id, seq, record_id, amount_minor, load_id)
SELECT r.contract_id, a.base + row_number() OVER (PARTITION BY r.contract_id ORDER BY r.line),
       r.record_id, r.amount_minor, $1
  FROM load_records r JOIN load_affected a ON a.contract_id = r.contract_id
 WHERE r.err IS NULL AND NOT r.redelivered`

func (l *loader) insertRecords(ctx context.Context, tx pgx.Tx) error {
	if err := tx.QueryRow(ctx, "SELECT count(*) FILTER (WHERE NOT redelivered), count(*) FILTER (WHERE redelivered) FROM load_records WHERE err IS NULL").
		Scan(&l.rep.RecordsAccepted, &l.rep.RecordsRedelivered); err != nil {
		return fmt.Errorf("counting records: %w", err)
	}
	if _, err := exec(ctx, tx, "collecting contracts", sqlAffected); err != nil {
		return err
	}
	if l.rep.RecordsAccepted == 0 {
		return nil
	}
	if _, err := exec(ctx, tx, "creating task rows", sqlRecordTasks); err != nil {
		return err
	}
	if _, err := exec(ctx, tx, "reading task positions", sqlBase); err != nil {
		return err
	}
	n, err := exec(ctx, tx, "storing records", sqlInsertRecords, l.rep.LoadID)
	if err != nil {
		return err
	}
	if n != l.rep.RecordsAccepted {
		return fmt.Errorf("storing records: stored %d, want %d", n, l.rep.RecordsAccepted)
	}
	return nil
}

// Locks the task rows of the affected contracts in partition_key order, the
// order every multi-row locker of tasks uses, so that loads, heartbeats and
// claims cannot deadlock. LockRows sits above the Sort, so rows are locked
// in that order.
const sqlLockTasks = `
SELECT count(*) FROM (
    SELECT 1 FROM tasks t JOIN load_affected a ON a.contract_id = t.partition_key
     ORDER BY t.partition_key FOR UPDATE OF t
) locked`

const sqlCheckLocked = `
SELECT a.contract_id, t.position, t.available, coalesce(a.base, -1), a.tiers_changed
  FROM load_affected a JOIN tasks t ON t.partition_key = a.contract_id
 WHERE (a.tiers_changed AND t.position > 0) OR (a.n_new > 0 AND t.available IS DISTINCT FROM a.base)
 ORDER BY a.contract_id LIMIT 1`

const sqlBumpTasks = `
UPDATE tasks t SET available = t.available + a.n_new, updated_at = now()
  FROM load_affected a
 WHERE t.partition_key = a.contract_id AND a.n_new > 0`

// finish records the load's counts and, as the last statements before
// commit, locks and updates the task rows.
func (l *loader) finish(ctx context.Context, tx pgx.Tx) error {
	rep := &l.rep
	if _, err := exec(ctx, tx, "loading: recording the load", `
UPDATE loads SET finished_at = clock_timestamp(), tier_rows = $2, records_accepted = $3,
       records_redelivered = $4, rows_rejected = $5
 WHERE load_id = $1`, rep.LoadID, rep.TierRows, rep.RecordsAccepted, rep.RecordsRedelivered, rep.RowsRejected); err != nil {
		return err
	}
	if l.records == nil {
		// Only tier changes of existing contracts need the check.
		if _, err := exec(ctx, tx, "loading: collecting contracts", sqlAffected); err != nil {
			return err
		}
	}
	if _, err := exec(ctx, tx, "loading: locking task rows", sqlLockTasks); err != nil {
		return err
	}
	var (
		contract         string
		pos, avail, base int64
		tiersChanged     bool
	)
	err := tx.QueryRow(ctx, sqlCheckLocked).Scan(&contract, &pos, &avail, &base, &tiersChanged)
	switch {
	case err == nil && tiersChanged && pos > 0:
		return fmt.Errorf("loading: contract %s had records priced while this load ran (position %d), so its tiers can no longer change; nothing was loaded", contract, pos)
	case err == nil:
		return fmt.Errorf("loading: tasks.available of contract %s changed from %d to %d during the load; is something other than a load adding records? nothing was loaded", contract, base, avail)
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("loading: checking task rows: %w", err)
	}
	if rep.RecordsAccepted > 0 {
		if _, err := exec(ctx, tx, "loading: updating task rows", sqlBumpTasks); err != nil {
			return err
		}
		if _, err := exec(ctx, tx, "loading: notifying workers", "SELECT pg_notify($1, '')", WorkChannel); err != nil {
			return err
		}
	}
	return nil
}
