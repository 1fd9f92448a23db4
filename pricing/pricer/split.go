package pricer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing"
)

var _ distributor.Splitter = (*Processor)(nil)

// Split splits a contract's pending records into segments at chunk
// boundaries (distributor.Splitter). A segment starting after seq s is
// priced from the cumulative gross of the contract's records up to s:
// the checkpoint's, plus the grosses of the chunks in between
// (record_chunks.gross_minor, the server's sum of each chunk's amounts),
// so splitting reads one small row per chunk and no record. A generation
// being re-priced is split the same way (its switch is made by the last
// of its pieces to catch up, see generations.go), and so is a preview
// whose pending records the current generation has all priced (see
// preview.go).
func (p *Processor) Split(ctx context.Context, b *distributor.Batch, size int64) (distributor.Split, error) {
	contract := contractOf(b)
	gen := generationOf(b)
	if gen > 1 {
		st, err := p.readGeneration(ctx, b.Tx, contract, gen)
		if err != nil || st.preview != nil && st.preview.basePos < b.Checkpoint.Available {
			return distributor.Split{}, err
		}
	}
	cp, err := checkpointOf(b)
	if err != nil {
		return distributor.Split{}, err
	}
	from, to := b.Checkpoint.Position, b.Checkpoint.Available
	// The schedule first: reading it (when not cached) is a statement of
	// its own on the batch's connection, which cannot run while the
	// chunks below are being read.
	sched, err := p.schedule(ctx, b.Tx, contract, gen, b.Checkpoint.Position > 0 || gen > 1)
	if err != nil {
		return distributor.Split{}, err
	}
	// Each chunk that holds pending records, with the gross of its pending
	// records: all of them, but for a chunk the checkpoint falls inside.
	rows, err := b.Tx.QueryContext(ctx, p.sql(`
		SELECT first_seq, last_seq,
		       CASE WHEN first_seq > ?1 THEN gross_minor
		            ELSE (SELECT sum(a)::bigint FROM unnest(amounts[?1 - first_seq + 2 : cardinality(amounts)]) AS a) END
		  FROM {{.Schema}}.record_chunks
		 WHERE contract_id = ?0 AND last_seq > ?1 AND first_seq <= ?2
		 ORDER BY first_seq`), contract, from, to)
	if err != nil {
		return distributor.Split{}, fmt.Errorf("reading the chunks of contract %s after seq %d: %w", contract, from, err)
	}
	defer rows.Close()
	var points []distributor.SplitPoint
	gross, last, next := cp.CumGross, from, from+size
	for rows.Next() {
		var first, lastSeq, g int64
		if err := rows.Scan(&first, &lastSeq, &g); err != nil {
			return distributor.Split{}, fmt.Errorf("reading the chunks of contract %s: %w", contract, err)
		}
		if lastSeq > to || first > last+1 {
			return distributor.Split{}, fmt.Errorf("%w: contract %s: chunk %d–%d after seq %d, with %d records available",
				ErrCorrupt, contract, first, lastSeq, last, to)
		}
		if start := first - 1; start >= next && to-start >= size/2 {
			st, err := stateAt(sched, gross)
			if err != nil {
				return distributor.Split{}, fmt.Errorf("splitting contract %s at seq %d: %w", contract, start, err)
			}
			points = append(points, distributor.SplitPoint{Position: start, State: st})
			next = start + size
		}
		if gross+g < gross {
			return distributor.Split{}, fmt.Errorf("contract %s: cumulative gross past seq %d overflows", contract, lastSeq)
		}
		gross, last = gross+g, lastSeq
	}
	if err := rows.Err(); err != nil {
		return distributor.Split{}, fmt.Errorf("reading the chunks of contract %s: %w", contract, err)
	}
	if last != to {
		return distributor.Split{}, fmt.Errorf("%w: contract %s has %d records available but its chunks end at seq %d",
			ErrCorrupt, contract, to, last)
	}
	if len(points) == 0 {
		return distributor.Split{}, nil
	}
	end, err := stateAt(sched, gross)
	if err != nil {
		return distributor.Split{}, fmt.Errorf("splitting contract %s at seq %d: %w", contract, to, err)
	}
	return distributor.Split{Points: points, End: end}, nil
}

// stateAt is the checkpoint of a contract whose records up to some seq
// add up to gross.
func stateAt(sched *pricing.Schedule, gross int64) (json.RawMessage, error) {
	cur, err := sched.Resume(gross)
	if err != nil {
		return nil, err
	}
	exact, err := sched.ExactNet(gross)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Checkpoint{CumGross: gross, CumNet: cur.CumNet(), CumNetExact: exact})
}
