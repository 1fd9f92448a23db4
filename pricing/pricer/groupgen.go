package pricer

import (
	"context"
	"fmt"
	"slices"

	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/batonhq/baton/distributor"
)

// A group's members past their first generation (re-priced contracts) are
// priced with the others, in the group's two statements, and get what
// Process gives a batch of theirs alone (generations.go; a preview's
// member is priced with its preview's tiers, and a group with a preview
// that has amendments, or whose batch may reach records the current
// generation has not priced, is priced member by member): one read of all
// their generations, the start of each generation's pricing recorded with
// its first batch, and the switch of each member whose batch catches up
// with its contract's records. The starts are one statement for the
// group, and so are the switches of the members that are their
// contracts' only piece (SwitchSQL takes arrays); a member whose contract
// has segments locks its generation's row and counts the other pieces
// first (switchWhenLast), member by member in the group's partition_key
// order, so two groups take those locks in the same order. The rows the
// group-wide statements lock are no other transaction's to take
// meanwhile: a generation's start is recorded by its partition's first
// batch, before any segment of it exists, and a contract's only piece is
// held by this group's fence (a re-pricing takes the task rows first).

// groupGens is how a group's members stand in their generations.
type groupGens struct {
	pending   []bool // member i prices a generation that is not current yet (a preview: see previews); nil: none does
	segmented []bool // member i's contract has segments (genState.segmented)
	unstarted []bool // member i's batch is its generation's first: its start is recorded with the group's switches
	// previews[i] is member i's preview, if it prices one; nil: none does.
	previews []*previewState
	// eachMember: some member prices a preview that has amendments or
	// whose batch may reach records its contract's current generation
	// has not priced (priceCurrent): the group is priced member by
	// member.
	eachMember bool
}

// readGroupGenerationsSQL reads, for each member (contracts $1,
// generations $2), its contract's current generation, the state of its
// own generation, whether its pricing started and whether the contract has
// segments; and of a preview, its tiers, how far the current generation
// is priced and whether it has amendments.
const readGroupGenerationsSQL = `SELECT m.i, coalesce(c.current_generation, 0), coalesce(g.state, ''), g.pricing_started_at IS NOT NULL,
       EXISTS (SELECT 1 FROM {{.Schema}}.tasks t WHERE t.kind = '` + Kind + `' AND t.segment_of = m.contract),
       CASE WHEN g.state = 'preview' THEN coalesce(g.tiers::text, '') ELSE '' END, coalesce(g.base_position, 0),
       coalesce(g.state = 'preview' AND EXISTS (SELECT 1 FROM {{.Schema}}.amendments a
                                                 WHERE a.contract_id = m.contract AND a.generation = m.gen AND a.preview), false)
  FROM unnest(?::text[], ?::bigint[]) WITH ORDINALITY AS m(contract, gen, i)
  LEFT JOIN {{.Schema}}.contracts c ON c.contract_id = m.contract
  LEFT JOIN {{.Schema}}.generations g ON g.contract_id = m.contract AND g.generation = m.gen
 ORDER BY m.i`

// readGroupGenerations reads how the group's members past their first
// generation stand, and notes those whose generation's first batch this
// is: switchCaughtUp records when their pricing started, in the switch of
// those that catch up (a contract of a few records starts and finishes its
// generation in one batch) and in one statement for the others. It reads
// nothing when every member is in its first generation.
func (p *Processor) readGroupGenerations(ctx context.Context, g *distributor.Group) (groupGens, error) {
	var idx []int
	var contracts []string
	var gens []int64
	for i, b := range g.Batches {
		if gen := generationOf(b); gen > 1 {
			idx, contracts, gens = append(idx, i), append(contracts, contractOf(b)), append(gens, gen)
		}
	}
	var out groupGens
	if len(idx) == 0 {
		return out, nil
	}
	rows, err := g.Tx.QueryContext(ctx, p.sql(readGroupGenerationsSQL), pgdialect.Array(contracts), pgdialect.Array(gens))
	if err != nil {
		return out, fmt.Errorf("reading the generations of %d contracts (%s, …): %w", len(idx), contracts[0], err)
	}
	defer rows.Close()
	out.pending, out.segmented, out.unstarted = make([]bool, len(g.Batches)), make([]bool, len(g.Batches)), make([]bool, len(g.Batches))
	seen := 0
	for rows.Next() {
		var (
			m, current, basePos         int64
			state, tiers                string
			started, segmented, amended bool
		)
		if err := rows.Scan(&m, &current, &state, &started, &segmented, &tiers, &basePos, &amended); err != nil {
			return out, fmt.Errorf("reading the generations of %d contracts (%s, …): %w", len(idx), contracts[0], err)
		}
		if m < 1 || m > int64(len(idx)) {
			return out, fmt.Errorf("reading the generations of %d contracts: a row for member %d", len(idx), m)
		}
		k := int(m - 1)
		if current == 0 {
			return out, fmt.Errorf("%w: partition of contract %s has no contract", ErrCorrupt, contracts[k])
		}
		pending, err := generationStanding(contracts[k], gens[k], current, state)
		if err != nil {
			return out, err
		}
		i := idx[k]
		out.pending[i], out.segmented[i] = pending, segmented
		out.unstarted[i] = pending && !started
		if pending && state == "preview" {
			b := g.Batches[i]
			pv, err := newPreviewState(contracts[k], current, tiers, basePos, "")
			if err != nil {
				return out, err
			}
			pv.amended = amended
			if out.previews == nil {
				out.previews = make([]*previewState, len(g.Batches))
			}
			out.previews[i] = pv
			out.eachMember = out.eachMember || amended || b.Checkpoint.Available > basePos
			// As process does for a preview's batch: only a piece of a
			// split preview looks at the generation's row when it
			// catches up, and no preview switches directly.
			look := segmented || isSegment(b)
			out.pending[i], out.segmented[i] = look, look
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("reading the generations of %d contracts (%s, …): %w", len(idx), contracts[0], err)
	}
	rows.Close()
	if seen != len(idx) {
		return out, fmt.Errorf("reading the generations of %d contracts: %d rows", len(idx), seen)
	}
	// Priced member by member (eachMember), process reads each member's
	// generation again, and records the start.
	return out, nil
}

// switchCaughtUp makes current the generation of each member that prices
// one not current yet and whose batch caught up with its records
// (results[i], its new checkpoint) as the last of its contract's pieces
// to, as Process does for a batch alone. Members that are pieces of one
// contract are looked at together: their checkpoints are written after
// this returns, so each reads as behind to the others. The members that
// need not look (a contract's partition, with no segments: its only
// piece) switch together, in one statement, which also records their
// pricing's start where this batch is their generation's first; the start
// of the other members' (gens.unstarted) is recorded in one statement
// after.
func (p *Processor) switchCaughtUp(ctx context.Context, g *distributor.Group, gens groupGens, results []distributor.Result) error {
	if gens.pending == nil {
		return nil
	}
	caughtUp := func(i int) bool { return gens.pending[i] && results[i].Position >= g.Batches[i].Checkpoint.Available }
	done := map[string]bool{}
	var direct []string
	var directGens []int64
	for i, b := range g.Batches {
		contract := contractOf(b)
		if !caughtUp(i) || done[contract] {
			continue
		}
		done[contract] = true
		var keys []string
		look := gens.segmented[i]
		for j, o := range g.Batches {
			if contractOf(o) != contract {
				continue
			}
			look = look || isSegment(o) || j != i
			if caughtUp(j) {
				keys = append(keys, o.Lease.Key)
			}
		}
		if !look {
			direct, directGens = append(direct, contract), append(directGens, generationOf(b))
			continue
		}
		if err := p.switchWhenLast(ctx, g.Tx, contract, generationOf(b), keys, true); err != nil {
			return err
		}
	}
	if len(direct) > 0 {
		if err := p.switchGenerations(ctx, g.Tx, direct, directGens); err != nil {
			return err
		}
	}
	var cs []string
	var gs []int64
	for i, b := range g.Batches {
		if i < len(gens.unstarted) && gens.unstarted[i] && !slices.Contains(direct, contractOf(b)) {
			cs, gs = append(cs, contractOf(b)), append(gs, generationOf(b))
		}
	}
	if len(cs) == 0 {
		return nil
	}
	return p.markPricingStarted(ctx, g.Tx, cs, gs)
}
