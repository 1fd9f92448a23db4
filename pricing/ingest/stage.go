package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The staging tables live until the end of the transaction. Rows keep
// their line numbers; err is set for an invalid row (the first problem
// found); raw holds the original fields as CSV when they cannot be rebuilt
// from the typed columns (invalid rows, integers with leading zeros).
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
    first_line   bigint,
    amend_seq    bigint, -- with Options.Amend: the seq of the stored record this row amends
    amend_old    bigint  -- and its amount before
) ON COMMIT DROP;
-- Each valid tier set: is its contract new, does the set differ from the
-- stored one, the contract's position when checked, and whether a
-- generation of it is being priced.
CREATE TEMP TABLE load_tier_sets (
    contract_id text COLLATE "C" NOT NULL,
    existed     boolean NOT NULL,
    changed     boolean NOT NULL,
    position    bigint NOT NULL,
    in_flight   boolean NOT NULL
) ON COMMIT DROP;
-- With Options.Reprice: the contracts whose changed tier set is applied by
-- re-pricing them (rerate.Start) rather than in place.
CREATE TEMP TABLE load_reprice (
    contract_id text COLLATE "C" NOT NULL
) ON COMMIT DROP;
-- Record ids that occur more than once in the file, with their first line.
CREATE TEMP TABLE load_dup_keys (
    contract_id text COLLATE "C" NOT NULL,
    record_id   text COLLATE "C" NOT NULL,
    first_line  bigint NOT NULL
) ON COMMIT DROP;
-- Contracts whose cumulative gross needs an exact check.
CREATE TEMP TABLE load_gross (
    contract_id text COLLATE "C" NOT NULL,
    stored      numeric NOT NULL
) ON COMMIT DROP;
-- The contracts with valid records or changed tiers. The load updates the
-- task rows of those with n_new > 0 and checks those with tiers_changed;
-- base is tasks.available before the load.
CREATE TEMP TABLE load_affected (
    contract_id   text COLLATE "C" NOT NULL,
    n_new         bigint NOT NULL,
    n_redelivered bigint NOT NULL,
    tiers_changed boolean NOT NULL,
    ord           bigint NOT NULL, -- 1, 2, ... in contract_id order
    base          bigint,
    rerate        boolean NOT NULL DEFAULT false -- re-priced (Options.Reprice, Options.Amend)
) ON COMMIT DROP;`

// rowSource feeds parsed rows to CopyFrom, at most one staging row per
// input row. next calls read for every input row it reads.
type rowSource struct {
	next     func(vals []any) (bool, error) // fills vals; false at the end
	vals     []any
	err      error
	n        int64 // input rows read
	stage    string
	progress func(string, int64)
}

// read counts an input row read.
func (s *rowSource) read() {
	s.n++
	if s.progress != nil && s.n%progressEvery == 0 {
		s.progress(s.stage, s.n)
	}
}

func (s *rowSource) Next() bool {
	more, err := s.next(s.vals)
	if err != nil {
		s.err = err
		return false
	}
	if !more && s.progress != nil {
		s.progress(s.stage, s.n)
	}
	return more
}

func (s *rowSource) Values() ([]any, error) { return s.vals, nil }
func (s *rowSource) Err() error             { return s.err }

// copyIn copies src into a staging table and analyses the columns in stats
// (none if stats is empty).
func (l *loader) copyIn(ctx context.Context, tx pgx.Tx, table string, cols []string, src *rowSource, stats string) error {
	src.vals = make([]any, len(cols))
	if src.progress == nil {
		src.progress = l.opts.Progress
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, src)
	l.rowsRead += src.n
	if src.err != nil {
		return src.err // the input's own error, not pgx's wrapping of it
	}
	if err != nil {
		return fmt.Errorf("copying rows to the database: %w", err)
	}
	if stats == "" {
		return nil
	}
	return analyze(ctx, tx, table, stats)
}

// analyze gathers statistics on columns of a staging table. Temporary
// tables are not analysed automatically; the row count, the number of
// contracts and the share of valid rows steer the plans.
func analyze(ctx context.Context, tx pgx.Tx, table, columns string) error {
	if _, err := tx.Exec(ctx, "ANALYZE "+table+" ("+columns+")"); err != nil {
		return fmt.Errorf("analyzing staged rows: %w", err)
	}
	return nil
}

// stage reports the load's next stage to Options.Progress, once.
func (l *loader) stage(name string) {
	if l.opts.Progress == nil || l.staged[name] {
		return
	}
	if l.staged == nil {
		l.staged = make(map[string]bool)
	}
	l.staged[name] = true
	l.opts.Progress(name, l.rowsRead)
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
	var src *rowSource
	src = &rowSource{stage: "tiers", next: func(v []any) (bool, error) {
		row, err := l.tiers.Next()
		if err == io.EOF {
			return false, nil
		}
		src.read()
		var le *LineError
		switch {
		case err == nil:
			v[0], v[1], v[2], v[3], v[4], v[5] = row.Line, row.ContractID, row.ThresholdMinor, row.DiscountBP, nil, nil
			if f := l.tiers.Fields(); !canonicalInt(f[1]) || !canonicalInt(f[2]) {
				v[4] = rawRow(f)
			}
		case errors.As(err, &le):
			if le.Row == nil && row.ContractID == "" && l.opts.SkipInvalid {
				// Any contract's tier set might lack this row, and none
				// may load incomplete. (All-or-nothing fails anyway.)
				return false, fatalInput(le.File, le.Line,
					"%s; cannot tell which contract this tier row belongs to, so no tier set can be trusted to be complete", le.Reason)
			}
			v[0], v[1], v[2], v[3], v[4], v[5] = le.Line, nullIfEmpty(row.ContractID), nil, nil, rawRow(le.Row), sanitize(le.Reason)
		default:
			return false, err
		}
		return true, nil
	}}
	if err := l.copyIn(ctx, tx, "load_tiers",
		[]string{"line", "contract_id", "threshold_minor", "discount_bp", "raw", "err"}, src, "contract_id, err"); err != nil {
		return err
	}
	type step struct {
		doing, sql string
		args       []any
	}
	steps := []step{
		{"checking for duplicate thresholds", sqlTierDuplicates, nil},
		{"checking tier counts", sqlTierTooMany, []any{MaxTiers}},
		{"rejecting incomplete tier sets", sqlTierSetRejected, []any{min(l.opts.MaxListed, MaxListedDefault)}},
		{"comparing with stored tier sets", sqlTierSets, nil},
	}
	// A preview of changed tiers keeps them with the preview even for a
	// contract with nothing priced yet: its records, when they come, are
	// priced under its current tiers until the preview is approved.
	preview := l.opts.Reprice && l.opts.Preview
	if l.opts.Reprice {
		steps = append(steps, step{"collecting contracts to re-price", sqlTierReprice, []any{preview}})
	} else {
		steps = append(steps, step{"checking for priced contracts", sqlTierFrozen, nil})
	}
	steps = append(steps, step{"checking for priced contracts", sqlTierSetsDropRejected, []any{preview}})
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

// sqlTierTooMany reports a contract with too many tier rows once, on its
// first valid row; sqlTierSetRejected then rejects its other rows with a
// reference to that line.
const sqlTierTooMany = `
WITH first AS (
    SELECT contract_id, min(line) FILTER (WHERE err IS NULL) AS line, count(*) AS n
      FROM load_tiers WHERE contract_id IS NOT NULL
     GROUP BY contract_id HAVING count(*) > $1::int
)
UPDATE load_tiers t
   SET err = format('contract %s has %s tier rows, at most %s are allowed', f.contract_id, f.n, $1::int)
  FROM first f
 WHERE t.line = f.line`

// sqlTierSetRejected rejects the valid rows of a tier set with invalid
// ones, saying how many are invalid and which: the first $1 of their lines
// (at most MaxListedDefault, fewer with a lower Options.MaxListed).
const sqlTierSetRejected = `
UPDATE load_tiers t
   SET err = format('tier set of contract %s is rejected because %s', t.contract_id,
                    CASE WHEN b.n = 1 THEN format('line %s is invalid', b.lines[1])
                         ELSE format('%s of its lines are invalid: %s%s', b.n,
                                     array_to_string(b.lines[1:least(b.n, $1::bigint)::int], ', '),
                                     CASE WHEN b.n > $1::bigint THEN format(' and %s more', b.n - $1::bigint) ELSE '' END)
                    END)
  FROM (SELECT contract_id, count(*) AS n, array_agg(line ORDER BY line) AS lines FROM load_tiers
         WHERE err IS NOT NULL AND contract_id IS NOT NULL GROUP BY contract_id) b
 WHERE t.contract_id = b.contract_id AND t.err IS NULL`

// Every valid tier set, whether its contract exists, whether the set
// differs from the stored one, and the contract's position as of now. The
// position is checked again under the task row lock before commit.
const sqlTierSets = `
INSERT INTO load_tier_sets (contract_id, existed, changed, position, in_flight)
WITH new AS (
    SELECT contract_id,
           array_agg(threshold_minor ORDER BY threshold_minor) AS th,
           array_agg(discount_bp ORDER BY threshold_minor) AS bp
      FROM load_tiers WHERE err IS NULL GROUP BY contract_id
), old AS (
    SELECT contract_id,
           array_agg(threshold_minor ORDER BY threshold_minor) AS th,
           array_agg(discount_bp::bigint ORDER BY threshold_minor) AS bp
      FROM {{.Schema}}.tiers WHERE contract_id IN (SELECT contract_id FROM new) GROUP BY contract_id
)
SELECT n.contract_id, c.contract_id IS NOT NULL,
       o.th IS DISTINCT FROM n.th OR o.bp IS DISTINCT FROM n.bp,
       coalesce(k.position, 0),
       EXISTS (SELECT 1 FROM {{.Schema}}.generations g WHERE g.contract_id = n.contract_id AND g.state IN ('pricing', 'preview'))
  FROM new n
  LEFT JOIN {{.Schema}}.contracts c ON c.contract_id = n.contract_id
  LEFT JOIN old o ON o.contract_id = n.contract_id
  LEFT JOIN {{.Schema}}.tasks k ON k.kind = '` + taskKind + `' AND k.partition_key = n.contract_id`

// sqlTierFrozen refuses a changed tier set of a contract with priced
// records (or being re-priced), naming the remedy on the set's first row
// and pointing the set's other rows at it, so the reason is said once.
const sqlTierFrozen = `
UPDATE load_tiers t
   SET err = CASE WHEN t.line > f.line THEN format('tiers of contract %s cannot change (see line %s)', s.contract_id, f.line)
                  WHEN s.in_flight
                  THEN format('tiers of contract %s cannot change: it is being re-priced; load the tiers with --reprice to re-price it under them', s.contract_id)
                  ELSE format('tiers of contract %s cannot change: %s of its records are already priced; load the tiers with --reprice to re-price it under them', s.contract_id, s.position) END
  FROM load_tier_sets s,
       LATERAL (SELECT min(x.line) AS line FROM load_tiers x WHERE x.contract_id = s.contract_id AND x.err IS NULL) f
 WHERE s.contract_id = t.contract_id AND s.existed AND s.changed AND (s.position > 0 OR s.in_flight) AND t.err IS NULL`

// sqlTierReprice (with Options.Reprice) sets aside the changed tier sets
// of contracts with priced records (with Options.Preview, $1, of every
// existing contract): reprice.Start applies them, under the task row
// lock, as it starts their new generation.
const sqlTierReprice = `
INSERT INTO load_reprice (contract_id)
SELECT contract_id FROM load_tier_sets WHERE existed AND changed AND (position > 0 OR in_flight OR $1::boolean) ORDER BY contract_id`

const sqlTierSetsDropRejected = `DELETE FROM load_tier_sets WHERE existed AND changed AND (position > 0 OR in_flight OR $1::boolean)`

const sqlInsertContracts = `
INSERT INTO {{.Schema}}.contracts (contract_id)
SELECT contract_id FROM load_tier_sets WHERE NOT existed ORDER BY contract_id
ON CONFLICT DO NOTHING`

// Existing conflicting rows are not locked by ON CONFLICT DO NOTHING.
const sqlInsertTierTasks = `
INSERT INTO {{.Schema}}.tasks (kind, partition_key)
SELECT '` + taskKind + `', contract_id FROM load_tier_sets ORDER BY contract_id
ON CONFLICT DO NOTHING`

const sqlDeleteChangedTiers = `
DELETE FROM {{.Schema}}.tiers WHERE contract_id IN (SELECT contract_id FROM load_tier_sets WHERE existed AND changed)`

const sqlInsertTiers = `
INSERT INTO {{.Schema}}.tiers (contract_id, threshold_minor, discount_bp)
SELECT t.contract_id, t.threshold_minor, t.discount_bp
  FROM load_tiers t JOIN load_tier_sets s ON s.contract_id = t.contract_id
 WHERE s.changed AND t.err IS NULL
 ORDER BY t.contract_id, t.threshold_minor`
