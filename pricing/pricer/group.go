package pricer

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricing"
)

// A group is the first batches of several contracts claimed together in
// one transaction (distributor.GroupProcessor): typically many tiny
// contracts. Its cost is two statements for them all, not per contract:
// one read of every member's records and of the tiers not cached yet,
// pricing in memory exactly as Process does for each member, and one write
// of every priced row. Each member's rows and checkpoint are those Process
// would give it alone. Members past their first generation (re-priced
// contracts) add a read of their generations, and the statements Process
// makes for them: the start of a generation's pricing, and the switch of
// each member that catches up, each one statement for all the members
// that need it (groupgen.go). A member that prices a preview is priced
// with its preview's tiers; a group with a preview that has amendments,
// or that may reach records its current generation has not priced, is
// priced member by member, in its transaction.

var _ distributor.GroupProcessor = (*Processor)(nil)

// groupInsertMax is the most priced rows a group writes with one INSERT of
// arrays; more are copied (COPY's setup costs more than a small INSERT).
const groupInsertMax = 256

// ProcessGroup prices the next batch of every contract in g.
func (p *Processor) ProcessGroup(ctx context.Context, g *distributor.Group) ([]distributor.Result, error) {
	gens, err := p.readGroupGenerations(ctx, g)
	if err != nil {
		return nil, err
	}
	if gens.eachMember {
		// A preview's batch that prices beside its own rows those of
		// the current generation, or applies amendments (see Process):
		// such a group is priced member by member, still in its
		// transaction.
		return p.processEach(ctx, g)
	}
	cps := make([]Checkpoint, len(g.Batches))
	for i, b := range g.Batches {
		cp, err := checkpointOf(b)
		if err != nil {
			return nil, err
		}
		cps[i] = cp
	}
	scheds := p.cachedSchedules(g)
	for i, pv := range gens.previews {
		if pv != nil {
			// The preview's tiers, not the contract's (read by readGroup
			// for the members without a schedule).
			b := g.Batches[i]
			if scheds[i], err = p.previewSchedule(contractOf(b), generationOf(b), pv); err != nil {
				return nil, err
			}
		}
	}
	w := getWorkspace()
	defer putWorkspace(w)
	ends, tiers, err := p.readGroup(ctx, g, w, scheds)
	if err != nil {
		return nil, err
	}
	if err := p.newSchedules(g, scheds, tiers); err != nil {
		return nil, err
	}
	w.lines = w.lines[:0]
	results := make([]distributor.Result, len(g.Batches))
	from := 0
	for i, b := range g.Batches {
		res, err := priceBatch(b, scheds[i], cps[i], w.recs[from:ends[i]], &w.lines)
		if err != nil {
			return nil, err
		}
		results[i] = res
		from = ends[i]
	}
	if err := p.writeGroupPriced(ctx, g, w, ends); err != nil {
		return nil, fmt.Errorf("writing %d priced records of %d contracts (%s, …): %w",
			len(w.lines), len(g.Batches), contractOf(g.Batches[0]), err)
	}
	if err := p.switchCaughtUp(ctx, g, gens, results); err != nil {
		return nil, err
	}
	return results, nil
}

// processEach prices each member of g as Process would alone, in g's
// transaction, then makes the switches of the members that caught up
// together (switchCaughtUp: pieces of one contract in g each read as
// behind to the others until g commits).
func (p *Processor) processEach(ctx context.Context, g *distributor.Group) ([]distributor.Result, error) {
	results := make([]distributor.Result, len(g.Batches))
	gens := groupGens{pending: make([]bool, len(g.Batches)), segmented: make([]bool, len(g.Batches))}
	for i, b := range g.Batches {
		res, st, err := p.process(ctx, b)
		if err != nil {
			return nil, err
		}
		results[i], gens.pending[i], gens.segmented[i] = res, st.pending, st.segmented
	}
	return results, p.switchCaughtUp(ctx, g, gens, results)
}

// cachedSchedules returns the members' tier schedules found in the cache,
// nil for the others.
func (p *Processor) cachedSchedules(g *distributor.Group) []*pricing.Schedule {
	scheds := make([]*pricing.Schedule, len(g.Batches))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range g.Batches {
		scheds[i] = p.schedules[schedKey{contractOf(b), generationOf(b)}]
	}
	return scheds
}

// newSchedules builds the schedules of the members not cached from the
// tiers read for them, and caches them as schedule does: once the contract
// has priced records, its tiers can no longer change.
func (p *Processor) newSchedules(g *distributor.Group, scheds []*pricing.Schedule, tiers [][]pricing.Tier) error {
	for i, b := range g.Batches {
		if scheds[i] != nil {
			continue
		}
		contract := contractOf(b)
		s, err := pricing.NewSchedule(tiers[i])
		if err != nil {
			return fmt.Errorf("tiers of contract %s: %w", contract, err)
		}
		scheds[i] = s
		if b.Checkpoint.Position > 0 || generationOf(b) > 1 {
			p.mu.Lock()
			p.schedules[schedKey{contract, generationOf(b)}] = s
			p.mu.Unlock()
		}
	}
	return nil
}

// readGroupSQL reads, for every member (contracts $1, after $2, limits
// $3), its tiers when $4 asks for them, as one row of arrays with
// first_seq 0, then its records as readRecordsSQL does (the same subquery,
// run once per member), member after member: one statement for the whole
// group.
const readGroupSQL = `SELECT m.i, x.first_seq, x.record_ids, x.amounts, x.thresholds, x.discounts
FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::boolean[]) WITH ORDINALITY AS m(contract, after, lim, want_tiers, i)
CROSS JOIN LATERAL (
	SELECT 0::bigint AS first_seq, NULL::text[] AS record_ids, NULL::bigint[] AS amounts,
	       array_agg(t.threshold_minor ORDER BY t.threshold_minor) AS thresholds,
	       array_agg(t.discount_bp::bigint ORDER BY t.threshold_minor) AS discounts
	FROM {{.Schema}}.tiers t
	WHERE m.want_tiers AND t.contract_id = m.contract
	HAVING m.want_tiers
	UNION ALL
	SELECT first_seq, record_ids, amounts, NULL, NULL FROM {{.Schema}}.record_chunks
	WHERE contract_id = m.contract
	  AND first_seq >= coalesce((SELECT max(first_seq) FROM {{.Schema}}.record_chunks
	                              WHERE contract_id = m.contract AND first_seq <= m.after + 1), 1)
	  AND first_seq <= m.after + m.lim
) x
ORDER BY m.i, x.first_seq`

// readGroup reads every member's records (up to its Limit after its
// checkpoint) into w.recs, member after member, from the chunks that hold
// them, as readRecords does for one, and the tiers of the members without
// a schedule; ends[i] is where member i's records end in w.recs.
func (p *Processor) readGroup(ctx context.Context, g *distributor.Group, w *workspace, scheds []*pricing.Schedule) (
	ends []int, tiers [][]pricing.Tier, err error) {
	n := len(g.Batches)
	contracts := make([]string, n)
	after := make([]int64, n)
	limits := make([]int64, n)
	want := make([]bool, n)
	for i, b := range g.Batches {
		contracts[i], after[i], limits[i], want[i] = contractOf(b), b.Checkpoint.Position, int64(b.Limit), scheds[i] == nil
	}
	w.recs, w.ids = w.recs[:0], w.ids[:0]
	ends = make([]int, n)
	tiers = make([][]pricing.Tier, n)
	err = g.QueryRaw(ctx, func(raw [][]byte) error {
		if len(raw) != 6 || len(raw[0]) != 8 || len(raw[1]) != 8 {
			return fmt.Errorf("%w: unexpected row", ErrCorrupt)
		}
		m := int64(binary.BigEndian.Uint64(raw[0]))
		if m < 1 || m > int64(n) {
			return fmt.Errorf("row of member %d in a group of %d", m, n)
		}
		if binary.BigEndian.Uint64(raw[1]) == 0 { // the member's tiers
			var err error
			if tiers[m-1], err = decodeTiers(raw[4], raw[5]); err != nil {
				return fmt.Errorf("%w: tiers of contract %s: %v", ErrCorrupt, contracts[m-1], err)
			}
			return nil
		}
		if err := w.appendChunk(raw[1:4], after[m-1], after[m-1]+limits[m-1]); err != nil {
			return err
		}
		ends[m-1] = len(w.recs)
		return nil
	}, p.sql(readGroupSQL), contracts, after, limits, want)
	if err != nil {
		return nil, nil, fmt.Errorf("reading records of %d contracts (%s, …): %w", n, contracts[0], err)
	}
	// A member with no records ends where the one before it does.
	for i := 1; i < n; i++ {
		ends[i] = max(ends[i], ends[i-1])
	}
	// The buffer may have moved while it grew: slice it only now.
	for i := range w.recs {
		w.recs[i].recordID = w.ids[w.recs[i].idFrom:w.recs[i].idTo]
	}
	return ends, tiers, nil
}

// decodeTiers reads a contract's tiers from its arrays of thresholds and
// discounts (bigint[], binary); NULL arrays are no tiers.
func decodeTiers(thresholds, discounts []byte) ([]pricing.Tier, error) {
	if thresholds == nil || discounts == nil {
		return nil, nil
	}
	th, err := arrayElems(thresholds)
	if err != nil {
		return nil, err
	}
	bp, err := arrayElems(discounts)
	if err != nil {
		return nil, err
	}
	if th.n != bp.n {
		return nil, fmt.Errorf("%d thresholds and %d discounts", th.n, bp.n)
	}
	out := make([]pricing.Tier, th.n)
	for i := range out {
		t, err := th.next()
		if err != nil || len(t) != 8 {
			return nil, fmt.Errorf("bad threshold")
		}
		d, err := bp.next()
		if err != nil || len(d) != 8 {
			return nil, fmt.Errorf("bad discount")
		}
		out[i] = pricing.Tier{ThresholdMinor: int64(binary.BigEndian.Uint64(t)), DiscountBP: int64(binary.BigEndian.Uint64(d))}
	}
	return out, nil
}

// insertGroupSQL writes a group's rows, each under its member's
// generation.
const insertGroupSQL = `INSERT INTO {{.Schema}}.priced_rows
(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, generation)
SELECT contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, $8, generation
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $9::bigint[])
	AS u(contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, generation)`

// writeGroupPriced writes every member's priced lines (w.lines, in
// w.recs's order; ends as readGroupRecords returned) into priced_rows, each
// under its member's claim version and generation: one INSERT of arrays,
// or COPY for many rows.
func (p *Processor) writeGroupPriced(ctx context.Context, g *distributor.Group, w *workspace, ends []int) error {
	if len(w.lines) > groupInsertMax {
		return p.copyGroupPriced(ctx, g, w, ends)
	}
	n := len(w.lines)
	contracts := make([]string, n)
	seqs := make([]int64, n)
	ids := make([]string, n)
	gross := make([]int64, n)
	discount := make([]int64, n)
	net := make([]int64, n)
	versions := make([]int64, n)
	gens := make([]int64, n)
	m := 0
	for i := range n {
		for i >= ends[m] {
			m++
		}
		b := g.Batches[m]
		r, l := &w.recs[i], &w.lines[i]
		contracts[i], seqs[i], ids[i] = contractOf(b), r.seq, string(r.recordID)
		gross[i], discount[i], net[i], versions[i], gens[i] = l.Gross, l.Discount, l.Net, b.Lease.Version, generationOf(b)
	}
	rows, err := g.Exec(ctx, p.sql(insertGroupSQL), contracts, seqs, ids, gross, discount, net, versions, g.Owner, gens)
	if err == nil && rows != int64(n) {
		err = fmt.Errorf("inserted %d rows, want %d", rows, n)
	}
	return err
}

// copyGroupPriced is writeGroupPriced with COPY.
func (p *Processor) copyGroupPriced(ctx context.Context, g *distributor.Group, w *workspace, ends []int) error {
	m, lo := 0, 0
	next := copyOrder(g.Batches[0], ends[0])
	n, err := g.CopyRows(ctx, []string{p.schema, "priced_rows"}, pricedColumns, func(row *distributor.CopyRow) (bool, error) {
		k, ok := next()
		for !ok {
			if m++; m == len(g.Batches) {
				return false, nil
			}
			lo = ends[m-1]
			next = copyOrder(g.Batches[m], ends[m]-lo)
			k, ok = next()
		}
		b := g.Batches[m]
		writePricedRow(row, contractOf(b), &w.recs[lo+k], &w.lines[lo+k], b.Lease.Version, g.Owner, generationOf(b))
		return true, nil
	})
	if err == nil && n != int64(len(w.lines)) {
		err = fmt.Errorf("copied %d rows, want %d", n, len(w.lines))
	}
	return err
}
