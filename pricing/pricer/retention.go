package pricer

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/schema"
)

// Retention: removing the records and priced output of finished loads.
//
// A load is pruned chunk by chunk, each batch of chunks (up to
// PruneConfig.BatchRecords records) in a short transaction of its own that
// deletes the chunks and their priced rows in one statement and adds what
// went to the contract's row of pruned_totals and to the load's
// records_pruned. A chunk is deleted only if all its records are priced:
// its last seq is at or below its contract's processed prefix
// (partition_progress.done_through: the position of its pricing task row,
// or, for a contract split into segments, the least of that and the
// positions of its segments not caught up; never the row's own position,
// which a split moves past records its segments have yet to price),
// checked by the DELETE itself. The processed prefix only moves forward
// (a split leaves it where it was) and a batch, the contract's or a
// segment's, only ever reads and writes records after its own checkpoint,
// so pruning and pricing never touch the same rows and neither waits for
// the other: no task row is changed, and only a rewind, which moves a
// checkpoint back, waits for the contract rows pruning locks. A batch whose
// chunks do not have exactly one priced row per record, with the records'
// gross in all and gross − discount = net on each, is rolled back and the
// pruning fails (ErrCorrupt): nothing that was not priced, or priced
// wrong, is removed, and the sums kept in pruned_totals are right.
//
// A load whose records are not all priced yet is not pruned at all
// (PruneSkipped, with how many are not); one being pruned has
// loads.prune_started_at set, and once nothing of it is left, pruned_at.
// A pruning that was interrupted leaves whole batches removed and the rest
// in place; pruning the load again carries on.
//
// What stays: the contracts, their tiers, their task rows with their
// checkpoints (position, cumulative gross and net) and the loads row; per
// contract, pruned_totals sums the records and the priced rows removed,
// so that Verify, VerifyCommitted and CheckProgress add them to what is
// still stored, and later loads go on numbering after the contract's
// highest seq; and, per chunk removed, its record ids and amounts
// (pruned_chunks, compressed: about 10 bytes a record for ids of a dozen
// characters, against some 90 for the chunk and its priced row), so that
// the loader still knows every record id a contract accepted: a record
// delivered again after its load was pruned is skipped as a re-delivery
// with the same amount, and refused with another (pruned records cannot be
// amended). Chunks pruned before pruned_chunks existed left no ids.
//
// A load running while a load of the same contracts is pruned sees every
// record id once: a batch moves its chunks from record_chunks to
// pruned_chunks in one statement, so in one commit, and the loader reads
// the two tables in one statement (a snapshot sees a chunk in one or the
// other) or, on its staged path, the stored ids before the pruned ones (a
// chunk moved in between is seen in both, never in neither: chunks only
// move that way). No lock is added: pruned_chunks is only inserted into
// by pruning and read by loads.

// PruneBatchRecordsDefault is PruneConfig.BatchRecords' default.
const PruneBatchRecordsDefault = 10_000

// PruneConfig configures PruneLoads.
type PruneConfig struct {
	// BatchRecords is about the most records (and priced rows) one
	// transaction deletes: whole chunks (of up to 1,024 records) until
	// this many are reached, at least one. Defaults to
	// PruneBatchRecordsDefault (10,000).
	BatchRecords int
	// DryRun reports what would go without changing anything.
	DryRun bool
	// OnBatch, if set, is called after each committed batch with the
	// load, the records it removed and how long its transaction took.
	OnBatch func(loadID, records int64, took time.Duration)
}

func (c *PruneConfig) setDefaults() {
	c.BatchRecords = cmp.Or(c.BatchRecords, PruneBatchRecordsDefault)
}

func (c PruneConfig) validate() error {
	if c.BatchRecords < 1 {
		return fmt.Errorf("prune batch size %d: must be at least 1", c.BatchRecords)
	}
	return nil
}

// Outcomes of a load's pruning.
const (
	PruneDone        = "pruned"         // nothing of the load is stored any more
	PruneWould       = "would_prune"    // DryRun: every record is priced, all would go
	PruneSkipped     = "skipped"        // some records are not priced yet: nothing removed
	PruneAlready     = "already_pruned" // pruned before
	PruneNotFound    = "not_found"      // no such load
	PruneInterrupted = "interrupted"    // the context ended between batches; prune again to carry on
)

// LoadPrune is what pruning did, or would do, to one load.
type LoadPrune struct {
	LoadID    int64     `json:"load_id"`
	LoadedAt  time.Time `json:"loaded_at"`
	Outcome   string    `json:"outcome"`
	Contracts int64     `json:"contracts"` // contracts with records of the load stored (before)
	Records   int64     `json:"records"`   // records removed (would be, with DryRun)
	Unpriced  int64     `json:"unpriced"`  // records of the load not priced yet
	Batches   int       `json:"batches"`
	// LongestBatch is the longest of its batch transactions.
	LongestBatch time.Duration `json:"-"`
	// Reason explains a skip, in an operator's words.
	Reason string `json:"reason,omitempty"`
}

// LoadsOlderThan returns the ids of the loads that finished more than age
// ago (by the database clock) and are not pruned yet, oldest first.
func (s *Store) LoadsOlderThan(ctx context.Context, age time.Duration) ([]int64, error) {
	rows, err := s.t.DB.QueryContext(ctx, s.t.SQL(`
		SELECT load_id FROM {{.Schema}}.loads
		 WHERE coalesce(finished_at, started_at) < now() - make_interval(secs => ?) AND pruned_at IS NULL
		 ORDER BY load_id`), age.Seconds())
	if err != nil {
		return nil, fmt.Errorf("finding loads older than %s: %w", age, err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("finding loads older than %s: %w", age, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finding loads older than %s: %w", age, err)
	}
	return ids, nil
}

// PruneLoads prunes each of the loads named, in order, and reports on each.
// A load not found, already pruned, or not entirely priced is reported and
// left alone, and the others are pruned all the same.
func (s *Store) PruneLoads(ctx context.Context, cfg PruneConfig, ids []int64) ([]LoadPrune, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := schema.Validate(s.t.Schema); err != nil {
		return nil, err
	}
	var out []LoadPrune
	for _, id := range ids {
		lp, err := s.pruneLoad(ctx, cfg, id)
		if err != nil {
			return out, err
		}
		out = append(out, lp)
		if lp.Outcome == PruneInterrupted {
			break
		}
	}
	return out, nil
}

// loadInfoSQL reads a load and how many of its stored records are priced
// and not. A chunk's records are priced when its last seq is at or below
// its contract's processed prefix (done_through; records past it count as
// not priced, although a finished segment may have priced some of them);
// a chunk without a pricing task row is not,
// nor is one of a contract with a generation being priced (its output is
// being replaced: the load is pruned once the generation is current).
const loadInfoSQL = `
SELECT l.load_id, coalesce(l.finished_at, l.started_at), l.pruned_at IS NOT NULL,
       coalesce(c.contracts, 0), coalesce(c.priced, 0), coalesce(c.unpriced, 0)
  FROM {{.Schema}}.loads l
  LEFT JOIN LATERAL (
       SELECT count(DISTINCT x.contract_id) AS contracts,
              sum(x.last_seq - x.first_seq + 1) FILTER (WHERE x.last_seq <= coalesce(t.done_through, 0)) AS priced,
              sum(least(x.last_seq - x.first_seq + 1, x.last_seq - coalesce(t.done_through, 0)))
                  FILTER (WHERE x.last_seq > coalesce(t.done_through, 0)) AS unpriced
         FROM {{.Schema}}.record_chunks x
         LEFT JOIN {{.Schema}}.partition_progress t ON t.kind = '` + Kind + `' AND t.partition_key = x.contract_id
                   AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.generations g
                                    WHERE g.contract_id = x.contract_id AND g.state IN ('pricing', 'preview'))
        WHERE x.load_id = l.load_id) c ON true
 WHERE l.load_id = ?`

// pruneLockSQL locks, FOR KEY SHARE in partition_key order, the task rows
// (never segment rows) of the contracts of the next chunks of load ?0 that pruneBatchSQL would
// remove (by this statement's snapshot), and returns their keys. A rewind
// (re-rating, which moves a checkpoint back and needs the records after
// it) locks FOR UPDATE: it waits for the prune transaction to commit, and
// the prune statement that follows, with a snapshot taken once the locks
// are held, sees any rewind committed before them. Batches (FOR KEY SHARE
// and FOR NO KEY UPDATE) and heartbeats do not wait.
const pruneLockSQL = `
SELECT t.partition_key FROM {{.Schema}}.tasks t
 WHERE t.kind = '` + Kind + `' AND t.segment_of IS NULL AND t.partition_key IN (
       SELECT DISTINCT contract_id FROM (
           SELECT x.contract_id
             FROM {{.Schema}}.record_chunks x
             JOIN {{.Schema}}.partition_progress t ON t.kind = '` + Kind + `' AND t.partition_key = x.contract_id
            WHERE x.load_id = ?0 AND x.last_seq <= t.done_through
            ORDER BY x.contract_id, x.first_seq
            LIMIT ?1) s)
 ORDER BY t.partition_key
   FOR KEY SHARE`

// pruneBatchSQL deletes the next chunks of load ?0 of the contracts ?2
// (whose task rows pruneLockSQL locked) whose records are all
// priced, whole chunks until ?1 records are reached (at least one chunk), with their priced rows,
// keeps their record ids and amounts in pruned_chunks (compressed), adds
// them to pruned_totals and the load's records_pruned, and returns
// the records deleted and the priced rows deleted with them, the records'
// gross and the priced rows' gross, and how many priced rows do not add
// up (gross - discount <> net).
const pruneBatchSQL = `
WITH pick AS (
    SELECT contract_id, first_seq FROM (
        SELECT x.contract_id, x.first_seq, x.last_seq - x.first_seq + 1 AS n,
               sum(x.last_seq - x.first_seq + 1) OVER (ORDER BY x.contract_id, x.first_seq) AS upto
          FROM {{.Schema}}.record_chunks x
          JOIN {{.Schema}}.partition_progress t ON t.kind = '` + Kind + `' AND t.partition_key = x.contract_id
         WHERE x.load_id = ?0 AND x.last_seq <= t.done_through AND x.contract_id = ANY (?2)
           AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.generations g
                            WHERE g.contract_id = x.contract_id AND g.state IN ('pricing', 'preview'))
         ORDER BY x.contract_id, x.first_seq
         LIMIT ?1) s
     WHERE upto - n < ?1
), gone AS (
    DELETE FROM {{.Schema}}.record_chunks c
     USING pick, {{.Schema}}.partition_progress t
     WHERE c.contract_id = pick.contract_id AND c.first_seq = pick.first_seq
       AND t.kind = '` + Kind + `' AND t.partition_key = c.contract_id AND c.last_seq <= t.done_through
       AND NOT EXISTS (SELECT 1 FROM {{.Schema}}.generations g
                        WHERE g.contract_id = c.contract_id AND g.state IN ('pricing', 'preview'))
    RETURNING c.contract_id, c.first_seq, c.last_seq, c.load_id, c.record_ids, c.amounts,
              (SELECT sum(a) FROM unnest(c.amounts) a) AS amount
), kept AS (
    INSERT INTO {{.Schema}}.pruned_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
    SELECT contract_id, first_seq, last_seq, load_id, record_ids, amounts FROM gone
), deleted AS (
    DELETE FROM {{.Schema}}.priced_rows p
     USING gone g
     WHERE p.contract_id = g.contract_id AND p.seq BETWEEN g.first_seq AND g.last_seq
    RETURNING p.contract_id, p.seq, p.generation, p.gross_minor, p.discount_minor, p.net_minor
), outp AS (
    -- The current rows among the deleted rows of every generation.
    SELECT DISTINCT ON (d.contract_id, d.seq) d.contract_id, d.gross_minor, d.discount_minor, d.net_minor
      FROM deleted d JOIN {{.Schema}}.contracts c ON c.contract_id = d.contract_id
     WHERE d.generation <= c.current_generation
     ORDER BY d.contract_id, d.seq, d.generation DESC
), recs AS (
    SELECT contract_id, sum(last_seq - first_seq + 1) AS n, max(last_seq) AS last_seq FROM gone GROUP BY contract_id
), money AS (
    SELECT contract_id, count(*) AS n, sum(gross_minor) AS gross, sum(discount_minor) AS discount, sum(net_minor) AS net
      FROM outp GROUP BY contract_id
), totals AS (
    INSERT INTO {{.Schema}}.pruned_totals AS p (contract_id, records, last_seq, gross_minor, discount_minor, net_minor)
    SELECT r.contract_id, r.n, r.last_seq, coalesce(m.gross, 0), coalesce(m.discount, 0), coalesce(m.net, 0)
      FROM recs r LEFT JOIN money m ON m.contract_id = r.contract_id
    ON CONFLICT (contract_id) DO UPDATE
       SET records = p.records + excluded.records, last_seq = greatest(p.last_seq, excluded.last_seq),
           gross_minor = p.gross_minor + excluded.gross_minor, discount_minor = p.discount_minor + excluded.discount_minor,
           net_minor = p.net_minor + excluded.net_minor
), ld AS (
    UPDATE {{.Schema}}.loads SET records_pruned = records_pruned + (SELECT coalesce(sum(n), 0) FROM recs)
     WHERE load_id = ?0
)
SELECT (SELECT coalesce(sum(n), 0) FROM recs)::bigint, (SELECT count(*) FROM outp)::bigint,
       (SELECT coalesce(sum(amount), 0) FROM gone)::numeric::text, (SELECT coalesce(sum(gross_minor), 0) FROM outp)::numeric::text,
       (SELECT count(*) FROM outp WHERE gross_minor - discount_minor <> net_minor)::bigint`

// pruneLoad prunes one load.
func (s *Store) pruneLoad(ctx context.Context, cfg PruneConfig, id int64) (LoadPrune, error) {
	lp := LoadPrune{LoadID: id}
	db, q := s.t.DB, s.t.SQL
	var pruned bool
	var priced int64
	err := db.QueryRowContext(ctx, q(loadInfoSQL), id).Scan(&lp.LoadID, &lp.LoadedAt, &pruned, &lp.Contracts, &priced, &lp.Unpriced)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		lp.Outcome, lp.Reason = PruneNotFound, fmt.Sprintf("no load %d", id)
		return lp, nil
	case err != nil:
		return lp, fmt.Errorf("reading load %d: %w", id, err)
	}
	switch {
	case pruned:
		lp.Outcome = PruneAlready
		return lp, nil
	case lp.Unpriced > 0:
		lp.Outcome = PruneSkipped
		lp.Reason = fmt.Sprintf("load %d: %d of its %d records are not priced yet; prune it once they are", id, lp.Unpriced, lp.Unpriced+priced)
		return lp, nil
	case cfg.DryRun:
		lp.Outcome, lp.Records = PruneWould, priced
		return lp, nil
	}
	if _, err := db.ExecContext(ctx, q(`UPDATE {{.Schema}}.loads SET prune_started_at = coalesce(prune_started_at, now()) WHERE load_id = ?`), id); err != nil {
		return lp, fmt.Errorf("marking load %d as being pruned: %w", id, err)
	}
	for {
		if ctx.Err() != nil {
			lp.Outcome = PruneInterrupted
			return lp, nil
		}
		start := time.Now()
		var recs, rows, bad int64
		var recGross, pricedGross string
		err := runTx(ctx, db, func(tx bun.Tx) error {
			var locked []string
			if err := tx.NewRaw(q(pruneLockSQL), id, cfg.BatchRecords).Scan(ctx, &locked); err != nil {
				return fmt.Errorf("locking the contracts of the next chunks: %w", err)
			}
			if len(locked) == 0 {
				return nil
			}
			if err := tx.QueryRowContext(ctx, q(pruneBatchSQL), id, cfg.BatchRecords, pgdialect.Array(locked)).Scan(&recs, &rows, &recGross, &pricedGross, &bad); err != nil {
				return err
			}
			if recs != rows || recGross != pricedGross || bad != 0 {
				return fmt.Errorf("%w: a batch of load %d's chunks holds %d records (gross %s) but %d priced rows (gross %s, %d not adding up): nothing of it was removed",
					ErrCorrupt, id, recs, recGross, rows, pricedGross, bad)
			}
			return nil
		})
		took := time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				lp.Outcome = PruneInterrupted
				return lp, nil
			}
			return lp, fmt.Errorf("pruning load %d (%d records removed so far): %w", id, lp.Records, err)
		}
		if recs == 0 {
			break
		}
		lp.Records += recs
		lp.Batches++
		lp.LongestBatch = max(lp.LongestBatch, took)
		if cfg.OnBatch != nil {
			cfg.OnBatch(id, recs, took)
		}
	}
	// Nothing left that is priced. Anything still stored is not (a
	// checkpoint moved back, say, by a failover to an asynchronous
	// standby): the load stays unfinished, to be pruned again.
	var left int64
	if err := db.QueryRowContext(ctx, q(`SELECT count(*) FROM {{.Schema}}.record_chunks WHERE load_id = ?`), id).Scan(&left); err != nil {
		return lp, fmt.Errorf("checking what is left of load %d: %w", id, err)
	}
	if left > 0 {
		lp.Outcome = PruneSkipped
		lp.Reason = fmt.Sprintf("load %d: %d chunks of records are left that are not priced; prune it again once they are", id, left)
		return lp, nil
	}
	if _, err := db.ExecContext(ctx, q(`UPDATE {{.Schema}}.loads SET pruned_at = now() WHERE load_id = ?`), id); err != nil {
		return lp, fmt.Errorf("marking load %d as pruned: %w", id, err)
	}
	lp.Outcome = PruneDone
	return lp, nil
}

// runTx runs fn in a READ COMMITTED transaction of its own.
func runTx(ctx context.Context, db bun.IDB, fn func(tx bun.Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
