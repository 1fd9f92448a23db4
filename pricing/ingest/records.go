package ingest

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"

	"github.com/jackc/pgx/v5"
)

// loadRecords loads the records file by the direct copy (streamRecords)
// unless the staged path must: then it stages the file (from its start
// again if the direct copy gave way) and runs the staged checks. It
// returns whether the direct copy stored the records.
func (l *loader) loadRecords(ctx context.Context, tx pgx.Tx) (bool, error) {
	if !l.opts.staged {
		var tierRejects bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM load_tiers WHERE err IS NOT NULL)").Scan(&tierRejects); err != nil {
			return false, fmt.Errorf("checking tier rows: %w", err)
		}
		// An all-or-nothing load with rejected tier rows fails: the staged
		// path lists every problem of the records too.
		if !tierRejects || l.opts.SkipInvalid {
			s := newStreamer(l, l.opts.MemoryLimit, l.recordsSize)
			rowsRead := l.rowsRead
			direct, err := l.streamRecords(ctx, tx, s)
			s.close()
			l.rep.keysPeak = s.keys.peak
			l.rep.heldPeak = s.heldPeak
			if s.spill != nil {
				l.rep.spilled = s.spill.bytes
			}
			if err != nil || direct {
				return direct, err
			}
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			l.rep.gaveWay = s.why
			if _, err := l.openRecords(); err != nil {
				return false, err
			}
			l.rowsRead = rowsRead // the file is read again
		}
	}
	if err := l.stageRecords(ctx, tx); err != nil {
		return false, err
	}
	return false, l.validateRecords(ctx, tx)
}

// stageRecords copies the records file into load_records, one row per
// input row, valid or not.
func (l *loader) stageRecords(ctx context.Context, tx pgx.Tx) error {
	var src *rowSource
	rows := newReadAhead(l.records, maphash.MakeSeed(), nil)
	defer rows.close()
	src = &rowSource{stage: "records", next: func(v []any) (bool, error) {
		it := rows.next()
		row, err, raw := it.row, it.err, it.raw
		if err == io.EOF {
			return false, nil
		}
		src.read()
		var le *LineError
		switch {
		case err == nil:
			v[0], v[1], v[2], v[3], v[4], v[5] = row.Line, row.ContractID, row.RecordID, row.AmountMinor, nullIfEmpty(raw), nil
		case errors.As(err, &le):
			v[0], v[1], v[2], v[3], v[4], v[5] = le.Line, nil, nil, nil, rawRow(le.Row), sanitize(le.Reason)
		default:
			return false, err
		}
		return true, nil
	}}
	src.progress = func(_ string, rows int64) { l.recordsProgress(rows) }
	return l.copyIn(ctx, tx, "load_records",
		[]string{"line", "contract_id", "record_id", "amount_minor", "raw", "err"}, src, "")
}

// recordsAnalyzed is what ANALYZE of the staged records reads.
const recordsAnalyzed = "contract_id, err, redelivered"

// validateRecords runs the checks over the staged records: unknown
// contracts, record ids that repeat one already stored or one earlier in
// the file (checkRepeats), and the cumulative gross.
func (l *loader) validateRecords(ctx context.Context, tx pgx.Tx) error {
	if err := analyze(ctx, tx, "load_records", recordsAnalyzed); err != nil {
		return err
	}
	l.stage(StageValidating)
	if _, err := exec(ctx, tx, "checking contracts", sqlRecordUnknownContract, l.opts.TiersPath); err != nil {
		return err
	}
	if err := l.checkRepeats(ctx, tx); err != nil {
		return err
	}
	if err := l.collectAffected(ctx, tx); err != nil {
		return err
	}
	return l.checkGross(ctx, tx)
}

const sqlRecordUnknownContract = `
UPDATE load_records r
   SET err = CASE WHEN EXISTS (SELECT 1 FROM load_tiers t WHERE t.contract_id = r.contract_id)
                  THEN format('unknown contract %s (its tier set in %s was rejected)', r.contract_id, $1::text)
                  ELSE format('unknown contract %s', r.contract_id) END
 WHERE r.err IS NULL AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.contracts c WHERE c.contract_id = r.contract_id)`

// checkRepeats handles record ids that repeat a stored record or an
// earlier row of the file: with the same amount the row is a re-delivery,
// with another amount an error.
func (l *loader) checkRepeats(ctx context.Context, tx pgx.Tx) error {
	l.repeatsChecked = true
	stored := sqlRecordStored
	if l.opts.Amend {
		stored = sqlRecordStoredAmend
	}
	n, err := exec(ctx, tx, "comparing with stored records", stored)
	if err != nil {
		return err
	}
	pruned, err := exec(ctx, tx, "comparing with pruned records", sqlRecordPruned)
	if err != nil {
		return err
	}
	if n+pruned > 0 {
		l.affectedStale = true
	}
	if l.opts.Amend && n > 0 {
		if _, err := exec(ctx, tx, "checking amendments", sqlAmendRepeats); err != nil {
			return err
		}
	}
	if n, err = exec(ctx, tx, "finding repeated record ids", sqlDupKeys); err != nil || n == 0 {
		return err
	}
	l.affectedStale = true
	_, err = exec(ctx, tx, "checking repeated record ids", sqlDupsMark)
	return err
}

// storedMatches (the WITH list of sqlRecordStored and
// sqlRecordStoredAmend) finds the stored record, if any, of each valid
// staged row: m(line, seq, amount_minor, load_id). How depends on how many
// rows the file has for the contract:
//
//   - up to fewStaged: each row's id is looked for in each of the
//     contract's chunks with array_position, which scans the chunk's ids in
//     place. An amendment file naming a few records of large contracts
//     (one record each of 200 contracts of 5,000) took 0.74 s unnesting
//     every stored record and 36 ms so;
//   - more: the contract's chunks are unnested once, in a materialized CTE,
//     and joined to its rows by hash, so that the cost follows the records
//     stored for the contract, not their product with the rows. (Joined to
//     the records view directly, the planner unnested each chunk once per
//     staged row of its contract: a pruned file of 1,571 records loaded
//     again took 41 s in sqlRecordPruned against some 6,000 pruned records
//     a contract, 1 s once each chunk is unnested once;
//     sqlCandidateRecords is the direct copy's counterpart.)
//
// A lookup costs about what unnesting 20 records does, so fewStaged
// lookups of a chunk cost less than unnesting its up to 1,024 records.
const storedMatches = `
k AS MATERIALIZED (
    SELECT contract_id, count(*) AS n FROM load_records WHERE err IS NULL GROUP BY contract_id
), few AS MATERIALIZED (
    SELECT s.line, c.first_seq + p.i - 1 AS seq, c.amounts[p.i] AS amount_minor, c.load_id
      FROM k
      JOIN load_records s ON s.contract_id = k.contract_id AND s.err IS NULL
      JOIN {{.Schema}}.record_chunks c ON c.contract_id = k.contract_id
     CROSS JOIN LATERAL (SELECT array_position(c.record_ids, s.record_id) AS i) p
     WHERE k.n <= ` + fewStaged + ` AND p.i IS NOT NULL
), many AS MATERIALIZED (
    SELECT x.contract_id, x.record_id, x.seq, x.amount_minor, x.load_id FROM {{.Schema}}.records x
     WHERE x.contract_id IN (SELECT contract_id FROM k WHERE n > ` + fewStaged + `)
), m AS (
    SELECT line, seq, amount_minor, load_id FROM few
     UNION ALL
    SELECT s.line, x.seq, x.amount_minor, x.load_id
      FROM load_records s
      JOIN many x ON x.contract_id = s.contract_id AND x.record_id = s.record_id
     WHERE s.err IS NULL
)`

// fewStaged is the most staged rows of a contract whose stored records
// storedMatches looks up one by one rather than unnesting them all.
const fewStaged = "16"

// sqlRecordStored compares the valid staged rows with the stored records
// of their contracts (storedMatches): a stored record id with the same
// amount is a re-delivery, with another an error naming --amend.
const sqlRecordStored = `
WITH` + storedMatches + `
UPDATE load_records r
   SET redelivered = m.amount_minor = r.amount_minor,
       err = CASE WHEN m.amount_minor <> r.amount_minor THEN
             format('record_id %s of contract %s has amount_minor %s, but load %s%s stored it with amount_minor %s; load the file with --amend to replace the stored amount',
                    to_json(r.record_id::text), r.contract_id, r.amount_minor, m.load_id,
                    coalesce(' (' || l.records_file || ')', ''), m.amount_minor) END
  FROM m LEFT JOIN {{.Schema}}.loads l ON l.load_id = m.load_id
 WHERE r.line = m.line`

// sqlRecordPruned compares the rows not matched to a stored record with
// the records pruned from the contracts they name (pruned_chunks, read
// through the pruned_records view by contract_id): a pruned record id with
// the same amount is a re-delivery, with another an error, with or
// without Options.Amend (a pruned record is not stored any more, nor its
// priced row, so it cannot be amended).
const sqlRecordPruned = `
WITH x AS MATERIALIZED (
    SELECT x.contract_id, x.record_id, x.amount_minor, x.load_id FROM {{.Schema}}.pruned_records x
     WHERE x.contract_id IN (SELECT contract_id FROM load_records WHERE err IS NULL)
)
UPDATE load_records r
   SET redelivered = m.amount_minor = r.amount_minor,
       err = CASE WHEN m.amount_minor <> r.amount_minor THEN
             format('record_id %s of contract %s has amount_minor %s, but load %s%s accepted it with amount_minor %s and it has been pruned since (worker prune); a pruned record cannot be amended',
                    to_json(r.record_id::text), r.contract_id, r.amount_minor, m.load_id,
                    coalesce(' (' || m.records_file || ')', ''), m.amount_minor) END
  FROM (SELECT s.line, x.amount_minor, x.load_id, l.records_file
          FROM load_records s
          JOIN x ON x.contract_id = s.contract_id AND x.record_id = s.record_id
          LEFT JOIN {{.Schema}}.loads l ON l.load_id = x.load_id
         WHERE s.err IS NULL AND NOT s.redelivered AND s.amend_seq IS NULL) m
 WHERE r.line = m.line`

// sqlRecordStoredAmend is sqlRecordStored with Options.Amend: a row with
// a stored record id and another amount amends that record (amend_seq,
// amend_old) instead of being an error.
const sqlRecordStoredAmend = `
WITH` + storedMatches + `
UPDATE load_records r
   SET redelivered = m.amount_minor = r.amount_minor,
       amend_seq = CASE WHEN m.amount_minor <> r.amount_minor THEN m.seq END,
       amend_old = CASE WHEN m.amount_minor <> r.amount_minor THEN m.amount_minor END
  FROM m
 WHERE r.line = m.line`

// sqlAmendRepeats settles a stored record id that several rows of the file
// name (with Options.Amend): the first row amends it or is a
// re-delivery, later rows with its amount are re-deliveries, and later
// rows with another amount are errors.
const sqlAmendRepeats = `
UPDATE load_records r
   SET amend_seq = NULL, amend_old = NULL,
       redelivered = r.amount_minor = f.amount_minor,
       err = CASE WHEN r.amount_minor <> f.amount_minor THEN
             format('record_id %s of contract %s has amount_minor %s here but %s on line %s',
                    to_json(r.record_id::text), r.contract_id, r.amount_minor, f.amount_minor, k.first_line) END
  FROM (SELECT contract_id, record_id, min(line) AS first_line FROM load_records
         WHERE err IS NULL AND (redelivered OR amend_seq IS NOT NULL)
         GROUP BY contract_id, record_id HAVING count(*) > 1) k
  JOIN load_records f ON f.line = k.first_line
 WHERE r.contract_id = k.contract_id AND r.record_id = k.record_id AND r.line <> k.first_line AND r.err IS NULL`

// Record ids that occur more than once among the valid rows not matched
// to a stored record, with their first line.
const sqlDupKeys = `
INSERT INTO load_dup_keys (contract_id, record_id, first_line)
SELECT contract_id, record_id, min(line) FROM load_records
 WHERE err IS NULL AND NOT redelivered AND amend_seq IS NULL
 GROUP BY contract_id, record_id HAVING count(*) > 1`

const sqlDupsMark = `
UPDATE load_records r
   SET first_line = k.first_line,
       redelivered = f.amount_minor = r.amount_minor,
       err = CASE WHEN f.amount_minor <> r.amount_minor THEN
             format('record_id %s of contract %s has amount_minor %s here but %s on line %s',
                    to_json(r.record_id::text), r.contract_id, r.amount_minor, f.amount_minor, k.first_line) END
  FROM load_dup_keys k JOIN load_records f ON f.line = k.first_line
 WHERE r.contract_id = k.contract_id AND r.record_id = k.record_id AND r.line <> k.first_line
   AND r.err IS NULL AND NOT r.redelivered AND r.amend_seq IS NULL`

// checkGross rejects the records that would take a contract's cumulative
// gross past the limit. Each record is at most MaxAmountMinor, so only a
// contract with more than limit/MaxAmountMinor records (stored and new) can
// get there, and only such contracts are summed exactly. Almost always
// there are none and this only reads load_affected.
func (l *loader) checkGross(ctx context.Context, tx pgx.Tx) error {
	n, err := exec(ctx, tx, "checking cumulative gross", sqlGrossCandidates, l.opts.maxGross, MaxAmountMinor)
	if err != nil || n == 0 {
		return err
	}
	// The counts above included re-deliveries; settle those first.
	if !l.repeatsChecked {
		if err := l.checkRepeats(ctx, tx); err != nil {
			return err
		}
	}
	if n, err = exec(ctx, tx, "checking cumulative gross", sqlGrossMark, l.opts.maxGross); err != nil || n == 0 {
		return err
	}
	l.affectedStale = true
	_, err = exec(ctx, tx, "checking repeated record ids", sqlDupOfRejected)
	return err
}

const sqlGrossCandidates = `
INSERT INTO load_gross (contract_id, stored)
SELECT a.contract_id,
       coalesce((SELECT sum(x.amount_minor) FROM {{.Schema}}.records x WHERE x.contract_id = a.contract_id), 0)
       -- Records removed by worker prune still count.
       + coalesce((SELECT p.gross_minor FROM {{.Schema}}.pruned_totals p WHERE p.contract_id = a.contract_id), 0)
  FROM load_affected a LEFT JOIN {{.Schema}}.tasks t ON t.kind = '` + taskKind + `' AND t.partition_key = a.contract_id
 WHERE a.n_new > 0 AND (coalesce(t.available, 0) + a.n_new)::numeric * $2::bigint > $1::bigint`

// Rejects the records from the one that takes the cumulative gross past
// the limit onwards.
const sqlGrossMark = `
UPDATE load_records r
   SET err = format('cumulative gross of contract %s would exceed %s', r.contract_id, $1::bigint)
  FROM (SELECT l.line, g.stored + sum(l.amount_minor) OVER (PARTITION BY l.contract_id ORDER BY l.line) AS running
          FROM load_records l JOIN load_gross g ON g.contract_id = l.contract_id
         WHERE l.err IS NULL AND NOT l.redelivered AND l.amend_seq IS NULL) w
 WHERE w.line = r.line AND w.running > $1::bigint`

// A re-delivery of a row that was itself rejected is rejected too.
const sqlDupOfRejected = `
UPDATE load_records r
   SET redelivered = false, err = format('same record as line %s, which is rejected', r.first_line)
  FROM load_records f
 WHERE r.first_line IS NOT NULL AND r.err IS NULL AND f.line = r.first_line AND f.err IS NOT NULL`

// insertRecords stores the accepted records, after checkRepeats: no index
// finds a repeated record id when record_chunks takes it.
func (l *loader) insertRecords(ctx context.Context, tx pgx.Tx) error {
	if !l.repeatsChecked {
		return errors.New("storing records: repeated record ids not checked")
	}
	if l.affectedStale {
		if err := l.collectAffected(ctx, tx); err != nil {
			return err
		}
	}
	rep := &l.rep
	if rep.RecordsAccepted == 0 {
		return nil
	}
	if _, err := exec(ctx, tx, "creating task rows", sqlRecordTasks); err != nil {
		return err
	}
	if _, err := exec(ctx, tx, "reading task positions", sqlBase); err != nil {
		return err
	}
	var n int64
	if err := tx.QueryRow(ctx, sqlInsertRecords, rep.LoadID, ChunkSize).Scan(&n); err != nil {
		return fmt.Errorf("storing records: %w", err)
	}
	if n != rep.RecordsAccepted {
		return fmt.Errorf("storing records: stored %d, want %d", n, rep.RecordsAccepted)
	}
	return nil
}

// collectAffected fills load_affected and takes the record counts from it.
func (l *loader) collectAffected(ctx context.Context, tx pgx.Tx) error {
	if _, err := exec(ctx, tx, "collecting contracts", "DELETE FROM load_affected"); err != nil {
		return err
	}
	if _, err := exec(ctx, tx, "collecting contracts", sqlAffected); err != nil {
		return err
	}
	// Without statistics the planner would hash the staged rows rather
	// than these few when joining the two.
	if _, err := exec(ctx, tx, "collecting contracts", "ANALYZE load_affected"); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, "SELECT coalesce(sum(n_new), 0), coalesce(sum(n_redelivered), 0) FROM load_affected").
		Scan(&l.rep.RecordsAccepted, &l.rep.RecordsRedelivered); err != nil {
		return fmt.Errorf("counting records: %w", err)
	}
	l.affectedStale = false
	return nil
}

// sqlAffected collects the contracts with valid records, with the numbers
// of new and re-delivered ones, and the existing contracts whose tiers
// change.
const sqlAffected = `
INSERT INTO load_affected (contract_id, n_new, n_redelivered, tiers_changed, ord)
SELECT contract_id, sum(n_new), sum(n_redelivered), bool_or(tiers_changed), row_number() OVER (ORDER BY contract_id)
  FROM (SELECT contract_id, count(*) FILTER (WHERE NOT redelivered AND amend_seq IS NULL) AS n_new,
               count(*) FILTER (WHERE redelivered) AS n_redelivered, false AS tiers_changed
          FROM load_records WHERE err IS NULL GROUP BY contract_id
        UNION ALL
        SELECT contract_id, 0, 0, true FROM load_tier_sets WHERE existed AND changed) u
 GROUP BY contract_id`

// Existing rows are not locked by ON CONFLICT DO NOTHING.
const sqlRecordTasks = `
INSERT INTO {{.Schema}}.tasks (kind, partition_key)
SELECT '` + taskKind + `', contract_id FROM load_affected WHERE n_new > 0 ORDER BY contract_id
ON CONFLICT DO NOTHING`

// Loads are serialised by the advisory lock and only loads raise
// available, so this plain read stays true until commit (checked again
// under the row locks).
const sqlBase = `
UPDATE load_affected a SET base = t.available FROM {{.Schema}}.tasks t
 WHERE t.kind = '` + taskKind + `' AND t.partition_key = a.contract_id`

// seq continues from tasks.available in file order; each contract's new
// records are cut into chunks of $2 from its first new seq on. The window
// partitions by ord, an integer standing for contract_id, which sorts
// faster. It returns the number of records stored.
const sqlInsertRecords = `
WITH numbered AS (
    SELECT r.contract_id, a.base, row_number() OVER (PARTITION BY a.ord ORDER BY r.line) AS k,
           r.record_id, r.amount_minor
      FROM load_records r JOIN load_affected a ON a.contract_id = r.contract_id
     WHERE r.err IS NULL AND NOT r.redelivered AND r.amend_seq IS NULL
), stored AS (
    INSERT INTO {{.Schema}}.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
    SELECT contract_id, base + min(k), base + max(k), $1,
           array_agg(record_id ORDER BY k), array_agg(amount_minor ORDER BY k)
      FROM numbered
     GROUP BY contract_id, base, (k - 1) / $2::bigint
     ORDER BY contract_id, min(k)
    RETURNING cardinality(record_ids) AS n
)
SELECT coalesce(sum(n), 0)::bigint FROM stored`
