package pricer

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// Progress is how far pricing is, as the contracts' checkpoints say,
// against the records stored: what status reports and what an export
// leaves out.
type Progress struct {
	Contracts int64 // contracts
	Records   int64 // records stored (not counting pruned ones)
	// Priced is the stored records the checkpoints of the consistent
	// contracts cover: the sum of their positions less the records their
	// segments have yet to price and their pruned records, which is the
	// number of priced rows stored when every batch wrote one per record.
	Priced int64
	// Pruned is the records (and priced rows) retention removed
	// (pruned_totals); a contract's records count them too, so its
	// checkpoint does not lie beyond them.
	Pruned int64
	// Unpriced is the records of the consistent contracts waiting to be
	// priced: those stored beyond their checkpoints and those their
	// segments have not priced yet.
	Unpriced int64
	// Inconsistent are the contracts, by id in byte order, whose
	// checkpoint or available count lies beyond their stored records:
	// something other than the loader added work to their pricing
	// partitions, or moved their checkpoints past records never priced.
	// Such a contract is neither done nor pending but an error, for an
	// operator to look at; it counts in neither Priced nor Unpriced.
	Inconsistent []Inconsistent
}

// Complete reports whether every stored record is priced and no contract
// is inconsistent.
func (p Progress) Complete() bool { return p.Unpriced == 0 && len(p.Inconsistent) == 0 }

// Inconsistent is a contract whose pricing partition claims more than its
// stored records.
type Inconsistent struct {
	ContractID string
	Position   int64 // the checkpoint: records priced, by the partition's account
	Available  int64 // records announced to the workers
	Records    int64 // records stored (seqs 1 to Records)
}

// Problem says what is wrong, in an operator's words.
func (i Inconsistent) Problem() string {
	if i.Position > i.Records {
		return fmt.Sprintf("checkpoint %d is beyond the contract's %d records: records were skipped or work was added by something other than the loader", i.Position, i.Records)
	}
	return fmt.Sprintf("%d records announced to the workers but %d stored: work was added by something other than the loader", i.Available, i.Records)
}

func (i Inconsistent) String() string { return "contract " + i.ContractID + ": " + i.Problem() }

// CheckProgress reads Progress in one statement (so one snapshot): every
// contract's pricing partition (kind Kind; none counts as position and
// available 0), with its segments if it was split (partition_progress),
// against its records, whose seqs are dense, so the last stored chunk's
// last seq is their number. It reads one task row (and those of its
// segments not caught up) and one index entry per contract, not the
// records. A contract's number of records is its highest seq, stored or
// pruned. Of a contract with a preview waiting (package rerate), whose
// partition prices the preview, it counts the records its current
// generation has priced, which the preview's batches keep up to date.
func (s *Store) CheckProgress(ctx context.Context) (Progress, error) {
	return s.checkProgress(ctx, s.t.DB)
}

// CheckProgressTx is CheckProgress in tx: with REPEATABLE READ, the
// progress of the snapshot the rest of tx reads.
func (s *Store) CheckProgressTx(ctx context.Context, tx bun.Tx) (Progress, error) {
	return s.checkProgress(ctx, tx)
}

func (s *Store) checkProgress(ctx context.Context, db bun.IDB) (Progress, error) {
	var p Progress
	var ids []string
	var positions, availables, records []int64
	err := db.QueryRowContext(ctx, s.t.SQL(progressSQL)).Scan(&p.Contracts, &p.Records, &p.Priced, &p.Unpriced, &p.Pruned,
		pgdialect.Array(&ids), pgdialect.Array(&positions), pgdialect.Array(&availables), pgdialect.Array(&records))
	if err != nil {
		return p, fmt.Errorf("checking pricing progress: %w", err)
	}
	for i, id := range ids {
		p.Inconsistent = append(p.Inconsistent, Inconsistent{ContractID: id, Position: positions[i], Available: availables[i], Records: records[i]})
	}
	return p, nil
}

const progressSQL = `
		WITH c AS (
			SELECT k.contract_id, coalesce(t.position, 0) AS position, coalesce(t.available, 0) AS available,
			       -- A contract with a preview waiting: its current generation's
			       -- priced records (the partition prices the preview).
			       coalesce(g.base_position, t.available - t.pending, 0) AS processed,
			       greatest(coalesce(r.last_seq, 0), coalesce(pt.last_seq, 0)) AS records,
			       coalesce(pt.records, 0) AS pruned
			FROM {{.Schema}}.contracts k
			LEFT JOIN {{.Schema}}.partition_progress t ON t.kind = '` + Kind + `' AND t.partition_key = k.contract_id
			LEFT JOIN {{.Schema}}.pruned_totals pt ON pt.contract_id = k.contract_id
			LEFT JOIN {{.Schema}}.generations g ON g.contract_id = k.contract_id AND g.state = 'preview'
			LEFT JOIN LATERAL (
				SELECT x.last_seq FROM {{.Schema}}.record_chunks x
				WHERE x.contract_id = k.contract_id
				ORDER BY x.first_seq DESC LIMIT 1
			) r ON true
		), v AS (
			SELECT *, position > records OR available > records AS bad FROM c
		)
		SELECT count(*), coalesce(sum(records - pruned), 0)::bigint,
		       coalesce(sum(processed - pruned) FILTER (WHERE NOT bad), 0)::bigint,
		       coalesce(sum(records - processed) FILTER (WHERE NOT bad), 0)::bigint,
		       coalesce(sum(pruned), 0)::bigint,
		       coalesce(array_agg(contract_id ORDER BY contract_id) FILTER (WHERE bad), '{}'),
		       coalesce(array_agg(position ORDER BY contract_id) FILTER (WHERE bad), '{}'),
		       coalesce(array_agg(available ORDER BY contract_id) FILTER (WHERE bad), '{}'),
		       coalesce(array_agg(records ORDER BY contract_id) FILTER (WHERE bad), '{}')
		FROM v`
