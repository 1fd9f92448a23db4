// Package reprice is the engine of package rerate: Start, which begins
// the re-pricing of contracts in a transaction of the caller's. It is a
// package of its own so that the loader (package ingest), whose
// transaction is a pgx one (it copies records with COPY), starts
// re-pricing in it, while rerate's public API offers bun transactions
// only. Package rerate documents the design; its Request and Started are
// these.
package reprice

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schema"
)

// Request asks for a contract to be re-priced.
type Request struct {
	// Contract is the contract's id.
	Contract string
	// From is the last record (seq) whose priced row stays as it is:
	// records after it are priced anew. 0 re-prices the whole contract.
	From int64
	// Reason and StartedBy are recorded with the new generation.
	Reason    string
	StartedBy string
	// NewTiers, if set, become the contract's tiers, and the whole
	// contract is re-priced with them (From is then 0).
	NewTiers []pricing.Tier
	// Preview prices the new generation without making it current: the
	// new tiers are kept with it, not made the contract's, until it is
	// approved (Approve) or discarded (Discard); see package rerate.
	Preview bool
}

// Started is what Start did for one contract.
type Started struct {
	Contract string `json:"contract_id"`
	// Generation is the new generation being priced, 0 when none was
	// needed: nothing after From was priced and no generation was in
	// flight, so the contract's next batches price the change anyway
	// (an amended record not priced yet, tiers of a contract with no
	// priced record).
	Generation int64 `json:"generation"`
	// From is the last record whose priced row the new generation shares
	// with the current one.
	From int64 `json:"from_seq"`
	// Abandoned is the generation that was being priced and is replaced
	// by the new one, 0 if none.
	Abandoned int64 `json:"abandoned,omitempty"`
	// Preview says the new generation is a preview.
	Preview bool `json:"preview,omitempty"`
}

// ErrPreviewPending is returned, wrapped, for a re-pricing or a preview of
// a contract whose preview waits to be approved or discarded, and for a
// preview of a contract with a generation being priced.
var ErrPreviewPending = errors.New("a preview is pending")

// ErrUnknownContract is rerate.ErrUnknownContract.
var ErrUnknownContract = errors.New("unknown contract")

// ErrPruned is rerate.ErrPruned.
var ErrPruned = errors.New("records were pruned")

// contractState is what Start reads of a contract, under its task row's
// lock.
type contractState struct {
	exists       bool
	hasTask      bool
	position     int64 // the task row's checkpoint: no record past it is priced
	doneThrough  int64 // the processed prefix: every record up to it is priced
	current      int64 // contracts.current_generation
	generations  int64 // generation rows
	inFlight     int64 // generation being priced, 0 if none
	inFlightFrom int64
	preview      int64 // generation waiting as a preview, 0 if none
	lastGen      int64 // the greatest generation recorded (discarded ones included)
	pruned       bool
	tiersJSON    string
}

// lockSQL locks the task rows of the contracts $1 (sorted) in
// partition_key order, FOR UPDATE: a batch in flight (which holds its row
// FOR KEY SHARE under the fence) ends first, and so does a prune
// transaction removing the contract's records (worker prune holds the rows
// FOR KEY SHARE too), so the positions and pruned sums read next are
// final; no batch or prune starts before commit. It is a statement of its
// own: readStateSQL, which follows, reads with a snapshot taken after the
// locks are held, and so sees what those transactions committed.
const lockSQL = `SELECT t.partition_key FROM {{.Schema}}.tasks t
 WHERE t.kind = '` + pricer.Kind + `' AND t.partition_key = ANY ($1::text[]) AND t.segment_of IS NULL
 ORDER BY t.partition_key
   FOR UPDATE`

// readStateSQL reads what Start needs of the contracts $1 (sorted), their
// task rows already locked (lockSQL), segment rows never: a contract's
// position and its processed prefix (done_through, which its segments
// not caught up hold back; they only move it forward meanwhile).
const readStateSQL = `
WITH locked AS (
    SELECT t.partition_key, t.position
      FROM {{.Schema}}.tasks t
     WHERE t.kind = '` + pricer.Kind + `' AND t.partition_key = ANY ($1::text[]) AND t.segment_of IS NULL
     ORDER BY t.partition_key
       FOR UPDATE
)
SELECT k.id, c.contract_id IS NOT NULL, l.partition_key IS NOT NULL, coalesce(l.position, 0),
       coalesce((SELECT p.done_through FROM {{.Schema}}.partition_progress p
                  WHERE p.kind = '` + pricer.Kind + `' AND p.partition_key = l.partition_key), 0),
       coalesce(c.current_generation, 1),
       (SELECT count(*) FROM {{.Schema}}.generations g WHERE g.contract_id = k.id),
       coalesce((SELECT g.generation FROM {{.Schema}}.generations g WHERE g.contract_id = k.id AND g.state = 'pricing'), 0),
       coalesce((SELECT g.from_seq FROM {{.Schema}}.generations g WHERE g.contract_id = k.id AND g.state = 'pricing'), 0),
       coalesce((SELECT g.generation FROM {{.Schema}}.generations g WHERE g.contract_id = k.id AND g.state = 'preview'), 0),
       coalesce((SELECT max(g.generation) FROM {{.Schema}}.generations g WHERE g.contract_id = k.id), 0),
       EXISTS (SELECT 1 FROM {{.Schema}}.pruned_totals p WHERE p.contract_id = k.id AND p.records > 0),
       coalesce((SELECT jsonb_agg(jsonb_build_object('threshold_minor', t.threshold_minor, 'discount_bp', t.discount_bp)
                                  ORDER BY t.threshold_minor)
                   FROM {{.Schema}}.tiers t WHERE t.contract_id = k.id), '[]'::jsonb)::text
  FROM unnest($1::text[]) AS k(id)
  LEFT JOIN {{.Schema}}.contracts c ON c.contract_id = k.id
  LEFT JOIN locked l ON l.partition_key = k.id
 ORDER BY k.id`

// Start is rerate.Store.StartTx (see there) in tx, for the pricing tables
// in schema schemaName.
func Start(ctx context.Context, tx Tx, schemaName string, reqs []Request) ([]Started, error) {
	reqs, err := merge(reqs)
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	q := func(s string) string { return schema.SQL(schemaName, s) }
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = r.Contract
	}
	if err := tx.Exec(ctx, q(lockSQL), keys); err != nil {
		return nil, fmt.Errorf("re-pricing: locking %d contracts: %w", len(keys), err)
	}
	states := make([]contractState, 0, len(keys))
	var id string
	var st contractState
	err = tx.ForEachRow(ctx, q(readStateSQL), []any{keys}, []any{&id, &st.exists, &st.hasTask, &st.position, &st.doneThrough, &st.current, &st.generations,
		&st.inFlight, &st.inFlightFrom, &st.preview, &st.lastGen, &st.pruned, &st.tiersJSON}, func() error {
		states = append(states, st)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("re-pricing: reading %d contracts: %w", len(keys), err)
	}
	if len(states) != len(reqs) {
		return nil, fmt.Errorf("re-pricing: read %d contracts, want %d", len(states), len(reqs))
	}
	for i, r := range reqs {
		switch s := states[i]; {
		case !s.exists:
			return nil, fmt.Errorf("re-pricing contract %s: %w", r.Contract, ErrUnknownContract)
		case s.pruned:
			return nil, fmt.Errorf("re-pricing contract %s: %w by worker prune; its output can no longer be priced again", r.Contract, ErrPruned)
		case s.preview > 0:
			return nil, fmt.Errorf("re-pricing contract %s: %w (generation %d): approve it or discard it first (worker generations approve|discard %s)",
				r.Contract, ErrPreviewPending, s.preview, r.Contract)
		case r.Preview && s.inFlight > 0:
			return nil, fmt.Errorf("previewing contract %s: generation %d is being priced to become current; preview once it is",
				r.Contract, s.inFlight)
		case r.Preview && !s.hasTask:
			return nil, fmt.Errorf("previewing contract %s: it has no pricing partition", r.Contract)
		}
	}

	var (
		out     []Started
		rewinds []partition.Rewind
		pending []pendingGeneration // the rewound contracts, in key order (rewinds[k] is pending[k]'s)
		tiers   = make([]string, len(reqs))
		// The generations being priced that the new ones replace, ended
		// once the rewind holds their contracts' task rows, segments
		// included: a segment's batch of such a generation may be in
		// flight until then (the lock above takes the contracts' own
		// rows only), and it locks the generation's row after its task
		// row when it catches up (pricer's switchWhenLast). Ended
		// before the rewind, the generation's rows that batch commits
		// would outlive it, and the two could wait for each other.
		abandons []abandoned
		// What the steps below do for all the contracts at once.
		newTiers           []string // contracts whose tiers NewTiers replace
		newTierSets        [][]pricing.Tier
		firsts, firstTiers []string // contracts whose generation 1 is recorded now, with its tiers
		previews           []string // contracts previewed, and their states
		previewStates      []contractState
		cpReqs             []checkpointReq // rewinds[k]'s checkpoint
	)
	for i, r := range reqs {
		s := states[i]
		from := r.From
		if s.inFlight > 0 {
			from = min(from, s.inFlightFrom)
		}
		tiers[i] = s.tiersJSON
		if r.NewTiers != nil {
			if tiers[i], err = tiersJSON(r.NewTiers); err != nil {
				return nil, fmt.Errorf("re-pricing contract %s: %w", r.Contract, err)
			}
		}
		if !r.Preview && (!s.hasTask || (s.position <= from && s.inFlight == 0)) {
			// Nothing priced that the change affects.
			if r.NewTiers != nil {
				newTiers, newTierSets = append(newTiers, r.Contract), append(newTierSets, r.NewTiers)
			}
			out = append(out, Started{Contract: r.Contract, From: from})
			continue
		}
		if s.generations == 0 {
			// Generation 1, recorded now that it is about to be
			// superseded, with the tiers it was priced with (the stored
			// ones, before NewTiers replace them).
			firsts, firstTiers = append(firsts, r.Contract), append(firstTiers, s.tiersJSON)
		}
		// A contract split into segments has records past its processed
		// prefix that are not priced yet: the new generation starts
		// where the prefix ends, if that is earlier (the records in
		// between are priced again, the same where nothing changed).
		from = min(from, s.doneThrough)
		started := Started{Contract: r.Contract, From: from}
		if s.inFlight > 0 {
			abandons = append(abandons, abandoned{r.Contract, s.inFlight})
			started.Abandoned = s.inFlight
		}
		if r.NewTiers != nil && !r.Preview {
			newTiers, newTierSets = append(newTiers, r.Contract), append(newTierSets, r.NewTiers)
		}
		if r.Preview {
			started.Preview = true
			previews, previewStates = append(previews, r.Contract), append(previewStates, s)
		}
		cpReqs = append(cpReqs, checkpointReq{r.Contract, from, tiers[i]})
		rewinds = append(rewinds, partition.Rewind{Key: r.Contract, Position: from})
		pending = append(pending, pendingGeneration{req: i, out: len(out)})
		out = append(out, started)
	}
	if err := recordFirstGenerations(ctx, tx, q, firsts, firstTiers); err != nil {
		return nil, err
	}
	if err := replaceTiers(ctx, tx, q, newTiers, newTierSets); err != nil {
		return nil, err
	}
	bases, err := previewBases(ctx, tx, q, previews, previewStates)
	if err != nil {
		return nil, err
	}
	cps, err := checkpointsAt(ctx, tx, q, cpReqs)
	if err != nil {
		return nil, err
	}
	for k := range rewinds {
		rewinds[k].State = cps[k]
	}
	if len(rewinds) == 0 {
		return out, nil
	}
	rewound, err := tx.Rewind(ctx, schemaName, pricer.Kind, rewinds)
	if err != nil {
		return nil, fmt.Errorf("re-pricing: rewinding %d contracts: %w", len(rewinds), err)
	}
	if err := abandon(ctx, tx, q, abandons, "pricing", "abandoned"); err != nil {
		return nil, err
	}
	byKey := make(map[string]partition.Rewound, len(rewound))
	for _, rw := range rewound {
		byKey[rw.Key] = rw
	}
	gens := make([]newGeneration, 0, len(pending))
	for k, pg := range pending {
		r := reqs[pg.req]
		rw, ok := byKey[r.Contract]
		if !ok {
			return nil, fmt.Errorf("re-pricing contract %s: its partition was not rewound", r.Contract)
		}
		if rw.Generation <= states[pg.req].current {
			return nil, fmt.Errorf("re-pricing contract %s: %w: the partition's generation %d is not past the current generation %d",
				r.Contract, pricer.ErrCorrupt, rw.Generation, states[pg.req].current)
		}
		if rw.Generation, err = skipUsed(ctx, tx, q, r.Contract, rw.Generation, states[pg.req].lastGen); err != nil {
			return nil, err
		}
		g := newGeneration{contract: r.Contract, generation: rw.Generation, from: rewinds[k].Position, state: "pricing",
			startedBy: r.StartedBy, reason: r.Reason, tiers: tiers[pg.req]}
		if r.Preview {
			b := bases[r.Contract]
			g.state, g.basePos, g.baseCP = "preview", &b.position, &b.checkpoint
		}
		gens = append(gens, g)
		out[pg.out].Generation = rw.Generation
	}
	if err := recordGenerations(ctx, tx, q, gens); err != nil {
		return nil, err
	}
	return out, nil
}

// pendingGeneration is a contract Start rewinds: its request's place in
// reqs and its place in Start's result.
type pendingGeneration struct{ req, out int }

// merge sorts reqs by contract and merges requests for the same one.
func merge(reqs []Request) ([]Request, error) {
	out := slices.Clone(reqs)
	slices.SortStableFunc(out, func(a, b Request) int { return cmp.Compare(a.Contract, b.Contract) })
	merged := out[:0]
	for _, r := range out {
		switch {
		case r.Contract == "":
			return nil, errors.New("re-pricing: empty contract id")
		case r.From < 0:
			return nil, fmt.Errorf("re-pricing contract %s: from %d, want ≥ 0", r.Contract, r.From)
		}
		if r.NewTiers != nil {
			if _, err := pricing.NewSchedule(r.NewTiers); err != nil {
				return nil, fmt.Errorf("re-pricing contract %s: %w", r.Contract, err)
			}
			r.From = 0
		}
		if n := len(merged); n > 0 && merged[n-1].Contract == r.Contract {
			m := &merged[n-1]
			if r.NewTiers != nil && m.NewTiers != nil && !slices.Equal(r.NewTiers, m.NewTiers) {
				return nil, fmt.Errorf("re-pricing contract %s: two different new tier sets", r.Contract)
			}
			m.From = min(m.From, r.From)
			if m.NewTiers == nil {
				m.NewTiers = r.NewTiers
			}
			m.Reason = cmp.Or(m.Reason, r.Reason)
			m.Preview = m.Preview || r.Preview
			m.StartedBy = cmp.Or(m.StartedBy, r.StartedBy)
			if m.NewTiers != nil {
				m.From = 0
			}
			continue
		}
		merged = append(merged, r)
	}
	return merged, nil
}

type tierJSON struct {
	ThresholdMinor int64 `json:"threshold_minor"`
	DiscountBP     int64 `json:"discount_bp"`
}

func tiersJSON(tiers []pricing.Tier) (string, error) {
	sorted := slices.Clone(tiers)
	slices.SortFunc(sorted, func(a, b pricing.Tier) int { return cmp.Compare(a.ThresholdMinor, b.ThresholdMinor) })
	out := make([]tierJSON, len(sorted))
	for i, t := range sorted {
		out[i] = tierJSON(t)
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func parseTiers(s string) ([]pricing.Tier, error) {
	var ts []tierJSON
	if err := json.Unmarshal([]byte(s), &ts); err != nil {
		return nil, err
	}
	out := make([]pricing.Tier, len(ts))
	for i, t := range ts {
		out[i] = pricing.Tier(t)
	}
	return out, nil
}

// abandoned is a generation being priced that a re-pricing replaces.
type abandoned struct {
	contract   string
	generation int64
}

// abandon ends each generation of gens, still being priced (in state
// from: pricing, or preview), as state to (abandoned, or discarded): its
// totals are frozen as far as it got (its view: the rows it shares with
// the current generation and the ones it priced), and its rows are
// deleted. One statement for them all.
func abandon(ctx context.Context, tx Tx, q func(string) string, gens []abandoned, from, to string) error {
	if len(gens) == 0 {
		return nil
	}
	contracts, numbers := make([]string, len(gens)), make([]int64, len(gens))
	for i, g := range gens {
		contracts[i], numbers[i] = g.contract, g.generation
	}
	if err := tx.Exec(ctx, q(`
WITH m AS (
    SELECT * FROM unnest($1::text[], $2::bigint[]) AS m(contract_id, generation)
), t AS (
    SELECT m.contract_id, m.generation, x.n, x.gr, x.d, x.net
      FROM m CROSS JOIN LATERAL (
           SELECT count(*) AS n, coalesce(sum(gross_minor), 0) AS gr, coalesce(sum(discount_minor), 0) AS d,
                  coalesce(sum(net_minor), 0) AS net
             FROM {{.Schema}}.priced_generation(m.contract_id, m.generation)) x
), gone AS (
    DELETE FROM {{.Schema}}.priced_rows p USING m WHERE p.contract_id = m.contract_id AND p.generation = m.generation
)
UPDATE {{.Schema}}.generations ge
   SET state = $4, finished_at = now(),
       records = t.n, gross_total = t.gr, discount_total = t.d, net_total = t.net
  FROM t
 WHERE ge.contract_id = t.contract_id AND ge.generation = t.generation AND ge.state = $3`), contracts, numbers, from, to); err != nil {
		if len(gens) == 1 {
			return fmt.Errorf("re-pricing contract %s: ending generation %d (%s): %w", contracts[0], numbers[0], from, err)
		}
		return fmt.Errorf("re-pricing %d contracts (%s, …): ending their generations (%s): %w", len(gens), contracts[0], from, err)
	}
	return nil
}
