package pricer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing"
)

// Previews. A preview is a generation priced without becoming current
// (package rerate): the contract's partition prices it, under its own
// generation number, with the tiers kept in its generation row (the
// contract's own are the current generation's until it is approved) and
// the amounts of its amendments (amendments.preview, applied to the
// records only on approval). Its batch that catches up does not switch.
//
// The current generation stays complete meanwhile: records loaded while
// a preview waits are priced under both. The generation row holds how far
// the current generation is priced (base_position) and its checkpoint
// there (base_checkpoint); a preview batch that reaches past it prices
// the records after it under the current generation too, with the
// contract's tiers and the records' own amounts, and moves base_position
// on, in the same fenced transaction as its own rows. So that
// base_position is never behind a batch's start, a preview is split into
// segments (Split) only when the current generation has priced every
// record it has pending (base_position at the available count: no load
// since it started): its segments then end at or before base_position,
// and price nothing under the current generation, and the partition
// goes on from there. A preview with records past base_position is
// priced in order by its partition. A split preview's pieces that catch
// up lock its generation's row, as a re-pricing's do, to serialize with
// an approval (generations.go).

// previewState is what a preview's batch reads of its generation row.
type previewState struct {
	current int64          // the contract's current generation
	tiers   []pricing.Tier // the preview's
	basePos int64          // every record up to it is priced under current
	base    Checkpoint     // the current generation's checkpoint at basePos
	amended bool           // it has amendments (amendForPreview)
}

func newPreviewState(contract string, current int64, tiersJSON string, basePos int64, baseCP string) (*previewState, error) {
	pv := &previewState{current: current, basePos: basePos}
	var ts []struct {
		ThresholdMinor int64 `json:"threshold_minor"`
		DiscountBP     int64 `json:"discount_bp"`
	}
	if err := json.Unmarshal([]byte(tiersJSON), &ts); err != nil {
		return nil, fmt.Errorf("%w: tiers of the preview of contract %s: %v", ErrCorrupt, contract, err)
	}
	for _, t := range ts {
		pv.tiers = append(pv.tiers, pricing.Tier{ThresholdMinor: t.ThresholdMinor, DiscountBP: t.DiscountBP})
	}
	if baseCP != "" {
		if err := json.Unmarshal([]byte(baseCP), &pv.base); err != nil {
			return nil, fmt.Errorf("%w: base checkpoint of the preview of contract %s: %v", ErrCorrupt, contract, err)
		}
	}
	return pv, nil
}

// previewSchedule is the schedule of the preview's tiers, cached by
// contract and generation like the others (a generation's tiers never
// change, and a discarded preview's number is never used again).
func (p *Processor) previewSchedule(contract string, gen int64, pv *previewState) (*pricing.Schedule, error) {
	key := schedKey{contract, gen}
	p.mu.Lock()
	s, ok := p.schedules[key]
	p.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := pricing.NewSchedule(pv.tiers)
	if err != nil {
		return nil, fmt.Errorf("tiers of generation %d of contract %s: %w", gen, contract, err)
	}
	p.mu.Lock()
	p.schedules[key] = s
	p.mu.Unlock()
	return s, nil
}

// amendForPreview gives the records of w the amounts the preview's
// amendments set, and returns what puts the records' own amounts back.
func (p *Processor) amendForPreview(ctx context.Context, b *distributor.Batch, w *workspace, contract string, gen int64) (func(), error) {
	type old struct {
		i      int
		amount int64
	}
	var olds []old
	restore := func() {
		for _, o := range olds {
			w.recs[o.i].amount = o.amount
		}
	}
	if len(w.recs) == 0 {
		return restore, nil
	}
	first := w.recs[0].seq
	rows, err := b.Tx.QueryContext(ctx, p.sql(`SELECT seq, new_amount_minor FROM {{.Schema}}.amendments
		WHERE contract_id = ? AND generation = ? AND preview AND seq BETWEEN ? AND ? ORDER BY amendment_id`),
		contract, gen, first, w.recs[len(w.recs)-1].seq)
	if err != nil {
		return nil, fmt.Errorf("reading the amendments of generation %d of contract %s: %w", gen, contract, err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq, amount int64
		if err := rows.Scan(&seq, &amount); err != nil {
			return nil, fmt.Errorf("reading the amendments of generation %d of contract %s: %w", gen, contract, err)
		}
		i := int(seq - first)
		olds = append(olds, old{i, w.recs[i].amount})
		w.recs[i].amount = amount
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the amendments of generation %d of contract %s: %w", gen, contract, err)
	}
	// Restored in reverse, so that a record amended twice gets its own
	// amount back.
	for l, r := 0, len(olds)-1; l < r; l, r = l+1, r-1 {
		olds[l], olds[r] = olds[r], olds[l]
	}
	return restore, nil
}

// priceCurrent prices, under the contract's current generation, the
// records of w after the preview's base_position up to end (the preview
// batch's new position), and records the current generation's new
// position and checkpoint in the preview's generation row (gen).
func (p *Processor) priceCurrent(ctx context.Context, b *distributor.Batch, w *workspace, gen int64, pv *previewState, end int64) error {
	contract := contractOf(b)
	if end <= pv.basePos {
		return nil
	}
	k := pv.basePos - b.Checkpoint.Position
	if k < 0 || k >= int64(len(w.recs)) {
		return fmt.Errorf("%w: contract %s: the current generation is priced to seq %d, outside the preview's batch after seq %d",
			ErrCorrupt, contract, pv.basePos, b.Checkpoint.Position)
	}
	sched, err := p.schedule(ctx, b.Tx, contract, pv.current, true)
	if err != nil {
		return err
	}
	recs := w.recs[k:]
	w.lines = w.lines[:0]
	state, err := priceRecords(contract, pv.basePos, sched, pv.base, recs, &w.lines)
	if err != nil {
		return err
	}
	if err := p.writePriced(ctx, b, w, recs, w.lines, pv.current); err != nil {
		return fmt.Errorf("writing %d priced records of generation %d of contract %s beside its preview: %w", len(w.lines), pv.current, contract, err)
	}
	if _, err := b.Tx.ExecContext(ctx, p.sql(`UPDATE {{.Schema}}.generations SET base_position = ?, base_checkpoint = ?
		WHERE contract_id = ? AND generation = ? AND state = 'preview'`), end, string(state), contract, gen); err != nil {
		return fmt.Errorf("recording how far generation %d of contract %s is priced: %w", pv.current, contract, err)
	}
	return nil
}
