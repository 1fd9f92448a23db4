// Package pricer is the pricing workload as a distributor.Processor: it
// prices a contract's consumption records in acceptance order, a batch at a
// time, writing priced rows in the batch's fenced transaction and carrying
// the cumulative totals in the partition's checkpoint.
//
// The checkpoint is the last priced seq (the distributor's position) plus
// the cumulative gross G and the exact cumulative net N(G)/10000. Resuming
// from it is exact: the next record's net is R(G1) − R(G) whatever batch
// boundaries and takeovers came before, so per-record nets always add up to
// the contract-level rounded net.
//
// # Use
//
// A pricing worker runs a Store's processor under a distributor of kind
// Kind over the contracts the loader (package ingest) created:
//
//	d, err := distributor.New(db, pricer.NewStore(db, "").Processor(), distributor.Config{Name: "worker-1"})
//	...
//	err = d.Run(ctx)
//
// Around it, the Store gives an operator what a pricing run needs:
// CheckProgress (how many records are priced, cheaply, at any time),
// Verify (once pricing is complete: every contract's total recomputed in
// SQL numeric arithmetic, independently of the Go engine, and checked
// against the priced rows), VerifyCommitted (the same for what is
// committed while pricing is under way) and retention (LoadsOlderThan and
// PruneLoads remove the records and priced rows of old, fully priced
// loads, keeping their sums so that totals and verification still hold).
package pricer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing"
	"github.com/batonhq/baton/schema"
)

// Kind is the kind of the pricing partitions (distributor.Config.Kind,
// partition.Store.Kind): one task row per contract, of this kind, which
// the loader creates and adds records to and only pricing workers claim.
// Other processors sharing the schema use kinds of their own, so a
// partition of theirs named like a contract is another partition.
const Kind = "pricing"

// Checkpoint is the pricing state stored with a partition's position.
type Checkpoint struct {
	// CumGross is the sum of the amounts priced so far (minor units).
	CumGross int64 `json:"cum_gross"`
	// CumNet is R(CumGross), the sum of the nets priced so far.
	CumNet int64 `json:"cum_net"`
	// CumNetExact is N(CumGross)/10000 as an exact decimal.
	CumNetExact string `json:"cum_net_exact"`
}

// ErrCorrupt reports stored data that breaks an invariant (a gap in a
// contract's record sequence, a checkpoint that does not match). It is not
// retried away: the partition is quarantined for an operator to look at.
var ErrCorrupt = errors.New("pricing data is inconsistent")

// Processor prices records. It is safe for concurrent use by the
// distributor's partition goroutines.
type Processor struct {
	mu sync.Mutex
	// schedules caches tier schedules by contract and generation, once
	// the generation has priced records or is past the first: the tiers
	// of a generation can no longer change then (the loader refuses, and
	// re-pricing with other tiers starts a new generation), so the cache
	// never goes stale.
	schedules map[schedKey]*pricing.Schedule
	schema    string
}

// newProcessor returns a pricing processor for the pricing tables in
// PostgreSQL schema schemaName (see Store.Processor).
func newProcessor(schemaName string) *Processor {
	return &Processor{schedules: map[schedKey]*pricing.Schedule{}, schema: schemaName}
}

// sql qualifies q's table names with the processor's schema.
func (p *Processor) sql(q string) string { return schema.SQL(p.schema, q) }

var _ distributor.Kinded = (*Processor)(nil)

// Kind is Kind: a distributor running the processor claims pricing
// partitions only.
func (p *Processor) Kind() string { return Kind }

type record struct {
	seq          int64
	recordID     []byte // in the workspace's id buffer
	idFrom, idTo int
	amount       int64
}

// Process prices the next batch of b's contract.
//
// A batch writes its rows into priced_rows under its generation (1 for a
// contract never re-priced). A batch of a later generation reads the
// contract's current generation first: if its own is newer (being priced,
// see generations.go), the batch that catches up with the contract's
// records (the last of its pieces to, when it is split) makes it current
// in the same transaction.
func (p *Processor) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	res, switches, err := p.process(ctx, b)
	if err != nil || !switches.pending || res.Position < b.Checkpoint.Available {
		return res, err
	}
	return res, p.switchWhenLast(ctx, b.Tx, contractOf(b), generationOf(b), []string{b.Lease.Key}, switches.segmented || isSegment(b))
}

// process prices b as Process does but for the switch: it returns how b's
// generation stands where a switch may follow (pending: a generation being
// priced, or a piece of a split preview, which switchWhenLast leaves
// alone unless an approval made it one being priced), for its caller to
// make (Process for a batch alone, processEach for a group's members
// together).
func (p *Processor) process(ctx context.Context, b *distributor.Batch) (distributor.Result, genState, error) {
	contract := contractOf(b)
	cp, err := checkpointOf(b)
	if err != nil {
		return distributor.Result{}, genState{}, err
	}
	gen := generationOf(b)
	var st genState
	if gen > 1 {
		if st, err = p.readGeneration(ctx, b.Tx, contract, gen); err != nil {
			return distributor.Result{}, genState{}, err
		}
	}
	var sched *pricing.Schedule
	if st.preview != nil {
		sched, err = p.previewSchedule(contract, gen, st.preview)
	} else {
		sched, err = p.schedule(ctx, b.Tx, contract, gen, b.Checkpoint.Position > 0 || gen > 1)
	}
	if err != nil {
		return distributor.Result{}, genState{}, err
	}
	w := getWorkspace()
	defer putWorkspace(w)
	if err := p.readRecords(ctx, b, w, contract, b.Checkpoint.Position, b.Limit); err != nil {
		return distributor.Result{}, genState{}, err
	}
	restore := func() {}
	if st.preview != nil && st.preview.amended {
		if restore, err = p.amendForPreview(ctx, b, w, contract, gen); err != nil {
			return distributor.Result{}, genState{}, err
		}
	}
	w.lines = w.lines[:0]
	res, err := priceBatch(b, sched, cp, w.recs, &w.lines)
	if err != nil {
		return distributor.Result{}, genState{}, err
	}
	if err := p.writePriced(ctx, b, w, w.recs, w.lines, gen); err != nil {
		return distributor.Result{}, genState{}, fmt.Errorf("writing %d priced records of generation %d of contract %s: %w", len(w.lines), gen, contract, err)
	}
	if st.preview != nil {
		// A preview never switches: it prices, beside its own rows, the
		// records the current generation has not priced yet (loaded
		// while it waits), under the current generation. A piece of a
		// split preview that catches up still locks the generation's row
		// (switchWhenLast), which serializes it with an approval: the
		// approval may have made the generation one being priced, and
		// then the last piece switches it.
		restore()
		look := st.segmented || isSegment(b)
		return res, genState{pending: look, segmented: look, preview: st.preview}, p.priceCurrent(ctx, b, w, gen, st.preview, res.Position)
	}
	return res, st, nil
}

// checkpointOf decodes b's checkpoint state.
func checkpointOf(b *distributor.Batch) (Checkpoint, error) {
	var cp Checkpoint
	if len(b.Checkpoint.State) > 0 {
		if err := json.Unmarshal(b.Checkpoint.State, &cp); err != nil {
			return cp, fmt.Errorf("%w: checkpoint of %s: %v", ErrCorrupt, contractOf(b), err)
		}
	}
	if b.Checkpoint.Position == 0 && cp.CumGross != 0 {
		return cp, fmt.Errorf("%w: contract %s has cumulative gross %d at position 0", ErrCorrupt, contractOf(b), cp.CumGross)
	}
	return cp, nil
}

// priceBatch prices recs, the records of b's contract that follow its
// checkpoint cp, appending their lines to lines, and returns the batch's
// new checkpoint.
func priceBatch(b *distributor.Batch, sched *pricing.Schedule, cp Checkpoint, recs []record, lines *[]pricing.Line) (distributor.Result, error) {
	contract := contractOf(b)
	if len(recs) == 0 {
		return distributor.Result{}, fmt.Errorf("%w: contract %s has %d records available but none after seq %d",
			ErrCorrupt, contract, b.Checkpoint.Available, b.Checkpoint.Position)
	}
	state, err := priceRecords(contract, b.Checkpoint.Position, sched, cp, recs, lines)
	if err != nil {
		return distributor.Result{}, err
	}
	return distributor.Result{Position: recs[len(recs)-1].seq, State: state}, nil
}

// priceRecords prices recs, the records of contract that follow seq after,
// whose checkpoint there is cp, appending their lines to lines, and
// returns the checkpoint after the last of them.
func priceRecords(contract string, after int64, sched *pricing.Schedule, cp Checkpoint, recs []record, lines *[]pricing.Line) (json.RawMessage, error) {
	cur, err := sched.Resume(cp.CumGross)
	if err != nil {
		return nil, fmt.Errorf("resuming contract %s at gross %d: %w", contract, cp.CumGross, err)
	}
	if cur.CumNet() != cp.CumNet && after > 0 {
		return nil, fmt.Errorf("%w: contract %s checkpoint net %d, tiers give %d", ErrCorrupt, contract, cp.CumNet, cur.CumNet())
	}
	for i, r := range recs {
		if want := after + int64(i) + 1; r.seq != want {
			return nil, fmt.Errorf("%w: contract %s record seq %d where %d was expected", ErrCorrupt, contract, r.seq, want)
		}
		line, err := cur.Next(r.amount)
		if err != nil {
			return nil, fmt.Errorf("pricing record %s of contract %s: %w", r.recordID, contract, err)
		}
		*lines = append(*lines, line)
	}
	exact, err := sched.ExactNet(cur.CumGross())
	if err != nil {
		return nil, err
	}
	return json.Marshal(Checkpoint{CumGross: cur.CumGross(), CumNet: cur.CumNet(), CumNetExact: exact})
}

// schedKey names a cached schedule: a contract's tiers in one generation.
type schedKey struct {
	contract   string
	generation int64
}

func (p *Processor) schedule(ctx context.Context, tx bun.Tx, contract string, gen int64, immutable bool) (*pricing.Schedule, error) {
	p.mu.Lock()
	s, ok := p.schedules[schedKey{contract, gen}]
	p.mu.Unlock()
	if ok {
		return s, nil
	}
	rows, err := tx.QueryContext(ctx, p.sql(`SELECT threshold_minor, discount_bp FROM {{.Schema}}.tiers WHERE contract_id = ?`), contract)
	if err != nil {
		return nil, fmt.Errorf("reading tiers of contract %s: %w", contract, err)
	}
	defer rows.Close()
	var tiers []pricing.Tier
	for rows.Next() {
		var t pricing.Tier
		if err := rows.Scan(&t.ThresholdMinor, &t.DiscountBP); err != nil {
			return nil, fmt.Errorf("reading tiers of contract %s: %w", contract, err)
		}
		tiers = append(tiers, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading tiers of contract %s: %w", contract, err)
	}
	s, err = pricing.NewSchedule(tiers)
	if err != nil {
		return nil, fmt.Errorf("tiers of contract %s: %w", contract, err)
	}
	if immutable {
		p.mu.Lock()
		p.schedules[schedKey{contract, gen}] = s
		p.mu.Unlock()
	}
	return s, nil
}

// contractOf is the contract whose records b holds: its partition, which
// for a segment is the contract it was split from.
func contractOf(b *distributor.Batch) string { return cmp.Or(b.Partition, b.Lease.Key) }
