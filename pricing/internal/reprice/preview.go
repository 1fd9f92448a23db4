package reprice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/batonhq/baton/partition"
	"github.com/batonhq/baton/pricing/internal/tables"
	"github.com/batonhq/baton/pricing/pricer"
	"github.com/batonhq/baton/schema"
)

// ErrNoPreview is returned, wrapped, by Approve and Discard for a contract
// named that has no preview waiting.
var ErrNoPreview = errors.New("no preview is pending")

// Decided is what Approve or Discard did to one contract's preview.
type Decided struct {
	Contract string `json:"contract_id"`
	// Generation is the preview's.
	Generation int64 `json:"generation"`
	// Current is the contract's current generation afterwards.
	Current int64 `json:"current_generation"`
	// Pricing (Approve only) says the preview had not caught up with the
	// contract's records: it is being priced, and becomes current in the
	// batch that catches up, as any re-pricing does.
	Pricing bool `json:"pricing,omitempty"`
}

// base is where a preview's contract's current generation is priced to:
// every record up to position, with checkpoint (JSON) there.
type base struct {
	position   int64
	checkpoint string
}

// previewBases is, for each contract about to be previewed (states[i] is
// contracts[i]'s), the current generation's priced prefix (its processed
// prefix) and its checkpoint there, under the contract's tiers. Rows of
// the current generation past the prefix (a segment's, ahead of it) are
// deleted: the preview's batches price those records under the current
// generation again, from the prefix on.
func previewBases(ctx context.Context, tx Tx, q func(string) string, contracts []string, states []contractState) (map[string]base, error) {
	if len(contracts) == 0 {
		return nil, nil
	}
	reqs := make([]checkpointReq, len(contracts))
	// Only a contract whose position is past its prefix (a segment
	// ahead of it) can have rows past the prefix: the others are left
	// out of the statement, which for 10,000 contracts with none sorted
	// every priced row (1 s).
	var ahead []string
	var gens, upto []int64
	for i, s := range states {
		reqs[i] = checkpointReq{contracts[i], s.doneThrough, s.tiersJSON}
		if s.position > s.doneThrough {
			ahead, gens, upto = append(ahead, contracts[i]), append(gens, s.current), append(upto, s.doneThrough)
		}
	}
	if len(ahead) > 0 {
		if err := tx.Exec(ctx, q(`
DELETE FROM {{.Schema}}.priced_rows p
 USING unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(id, gen, upto)
 WHERE p.contract_id = u.id AND p.generation = u.gen AND p.seq > u.upto`), ahead, gens, upto); err != nil {
			return nil, fmt.Errorf("previewing %d contracts (%s, …): removing rows past their priced prefixes: %w", len(ahead), ahead[0], err)
		}
	}
	cps, err := checkpointsAt(ctx, tx, q, reqs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]base, len(contracts))
	for i, c := range contracts {
		out[c] = base{states[i].doneThrough, string(cps[i])}
	}
	return out, nil
}

// skipUsed gives contract's partition, just rewound to generation gen, a
// generation past every one recorded (last): a discarded preview's
// partition went back to the current generation, and its number is not
// used again.
func skipUsed(ctx context.Context, tx Tx, q func(string) string, contract string, gen, last int64) (int64, error) {
	if gen > last {
		return gen, nil
	}
	if err := setGenerations(ctx, tx, q, []string{contract}, []int64{last + 1}); err != nil {
		return 0, fmt.Errorf("re-pricing contract %s: %w", contract, err)
	}
	return last + 1, nil
}

// setGenerations sets the generation of each contract's partition to
// gens[i] (their rows are locked, and were just rewound: their versions
// fence out earlier claims).
func setGenerations(ctx context.Context, tx Tx, q func(string) string, contracts []string, gens []int64) error {
	if err := tx.Exec(ctx, q(`UPDATE {{.Schema}}.tasks t SET generation = u.gen
  FROM unnest($1::text[], $2::bigint[]) AS u(id, gen)
 WHERE t.kind = '`+pricer.Kind+`' AND t.partition_key = u.id AND t.segment_of IS NULL`), contracts, gens); err != nil {
		return fmt.Errorf("setting their partitions' generations: %w", err)
	}
	return nil
}

// previewState is what Approve and Discard read of a contract, under its
// task row's lock.
type previewState struct {
	exists              bool
	generation, current int64 // the preview's (0 if none), the current one
	partitionGen        int64
	basePos             int64 // the current generation's priced prefix
	baseCP              string
}

const readPreviewsSQL = `
SELECT k.id, c.contract_id IS NOT NULL, coalesce(g.generation, 0), coalesce(c.current_generation, 0),
       coalesce(t.generation, 0), coalesce(g.base_position, 0), coalesce(g.base_checkpoint::text, '{}')
  FROM unnest($1::text[]) AS k(id)
  LEFT JOIN {{.Schema}}.contracts c ON c.contract_id = k.id
  LEFT JOIN {{.Schema}}.generations g ON g.contract_id = k.id AND g.state = 'preview'
  LEFT JOIN {{.Schema}}.tasks t ON t.kind = '` + pricer.Kind + `' AND t.partition_key = k.id AND t.segment_of IS NULL
 ORDER BY k.id`

// lockPreviews locks the task rows of contracts (every contract with a
// preview if empty) as Start does, and reads their previews. A contract
// named without a preview is refused (ErrNoPreview), as is an unknown one.
func lockPreviews(ctx context.Context, tx Tx, q func(string) string, verb string, contracts []string) ([]string, []previewState, error) {
	keys := slices.Clone(contracts)
	if len(keys) == 0 {
		var id string
		if err := tx.ForEachRow(ctx, q(`SELECT contract_id FROM {{.Schema}}.generations WHERE state = 'preview'`), nil,
			[]any{&id}, func() error { keys = append(keys, id); return nil }); err != nil {
			return nil, nil, fmt.Errorf("%s previews: listing them: %w", verb, err)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if len(keys) == 0 {
		return nil, nil, nil
	}
	if err := tx.Exec(ctx, q(lockSQL), keys); err != nil {
		return nil, nil, fmt.Errorf("%s previews: locking %d contracts: %w", verb, len(keys), err)
	}
	var (
		id  string
		st  previewState
		out []previewState
	)
	err := tx.ForEachRow(ctx, q(readPreviewsSQL), []any{keys}, []any{&id, &st.exists, &st.generation, &st.current, &st.partitionGen,
		&st.basePos, &st.baseCP}, func() error {
		out = append(out, st)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("%s previews: reading %d contracts: %w", verb, len(keys), err)
	}
	for i, s := range out {
		switch {
		case !s.exists:
			return nil, nil, fmt.Errorf("%s the preview of contract %s: %w", verb, keys[i], ErrUnknownContract)
		case s.generation == 0:
			return nil, nil, fmt.Errorf("%s the preview of contract %s: %w", verb, keys[i], ErrNoPreview)
		case s.partitionGen != s.generation:
			return nil, nil, fmt.Errorf("%s the preview of contract %s: %w: its partition prices generation %d, its preview is %d",
				verb, keys[i], pricer.ErrCorrupt, s.partitionGen, s.generation)
		}
	}
	return keys, out, nil
}

// Approve is rerate.Store.ApproveTx (see there) in tx, for the pricing
// tables in schema schemaName. The contracts are decided together, a few
// statements for them all (the previews' tiers and amendments become the
// contracts', the previews not caught up go on as generations being
// priced), then one switch for those caught up.
func Approve(ctx context.Context, tx Tx, schemaName string, contracts []string) ([]Decided, error) {
	q := func(s string) string { return schema.SQL(schemaName, s) }
	keys, states, err := lockPreviews(ctx, tx, q, "approving", contracts)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	behindOf, err := previewsBehind(ctx, tx, q, keys)
	if err != nil {
		return nil, err
	}
	for _, step := range []struct{ doing, sql string }{
		{"replacing their tiers", `DELETE FROM {{.Schema}}.tiers WHERE contract_id = ANY ($1::text[])`},
		{"replacing their tiers", approveTiersSQL},
		{"amending their records", applyPreviewAmendmentsSQL},
		{"recording their amendments", `UPDATE {{.Schema}}.amendments a SET preview = false
  FROM {{.Schema}}.generations g
 WHERE a.contract_id = ANY ($1::text[]) AND a.preview
   AND g.contract_id = a.contract_id AND g.generation = a.generation AND g.state = 'preview'`},
	} {
		if err := tx.Exec(ctx, q(step.sql), keys); err != nil {
			return nil, fmt.Errorf("approving %d previews: %s: %w", len(keys), step.doing, err)
		}
	}
	out := make([]Decided, len(keys))
	var behind []string
	for i, c := range keys {
		s := states[i]
		out[i] = Decided{Contract: c, Generation: s.generation, Current: s.current}
		if behindOf[c] {
			// Not caught up: it goes on as a generation being priced,
			// which the batch that catches up makes current.
			out[i].Pricing = true
			behind = append(behind, c)
		}
	}
	if err := tx.Exec(ctx, q(`UPDATE {{.Schema}}.generations SET state = 'pricing'
 WHERE contract_id = ANY ($1::text[]) AND state = 'preview'`), behind); err != nil {
		return nil, fmt.Errorf("approving %d previews not caught up: %w", len(behind), err)
	}
	if err := switchCaughtUp(ctx, tx, q, out); err != nil {
		return nil, err
	}
	return out, nil
}

// previewsBehindSQL locks the preview generations' rows of contracts $1
// (sorted; their task rows already locked), then, in a statement of its
// own, so under a snapshot taken once it holds them, reads which have a
// piece (the contract's partition or one of its segments) behind its
// records. A split preview's piece whose last batch is in flight locks
// the row too (pricer's switchWhenLast): either it committed before the
// lock, and is read as caught up, or it waits for the approval and reads
// the state it leaves.
const (
	lockPreviewGenerationsSQL = `SELECT g.contract_id FROM {{.Schema}}.generations g
 WHERE g.contract_id = ANY ($1::text[]) AND g.state = 'preview'
 ORDER BY g.contract_id COLLATE "C"
   FOR UPDATE`
	previewsBehindSQL = `SELECT k.id, EXISTS (SELECT 1 FROM {{.Schema}}.tasks t
                      WHERE t.kind = '` + pricer.Kind + `' AND (t.partition_key = k.id OR t.segment_of = k.id)
                        AND t.position < t.available)
  FROM unnest($1::text[]) AS k(id)`
)

// previewsBehind locks the previews of contracts (their task rows already
// locked) and says which have not caught up with their records.
func previewsBehind(ctx context.Context, tx Tx, q func(string) string, contracts []string) (map[string]bool, error) {
	if err := tx.Exec(ctx, q(lockPreviewGenerationsSQL), contracts); err != nil {
		return nil, fmt.Errorf("approving %d previews: locking their generations: %w", len(contracts), err)
	}
	var (
		id     string
		behind bool
		out    = make(map[string]bool, len(contracts))
	)
	if err := tx.ForEachRow(ctx, q(previewsBehindSQL), []any{contracts}, []any{&id, &behind}, func() error {
		out[id] = behind
		return nil
	}); err != nil {
		return nil, fmt.Errorf("approving %d previews: reading how far they are priced: %w", len(contracts), err)
	}
	return out, nil
}

// switchCaughtUp makes the approved previews of out that are caught up
// (not Pricing) current, in one statement for them all.
func switchCaughtUp(ctx context.Context, tx Tx, q func(string) string, out []Decided) error {
	var (
		contracts []string
		gens      []int64
		at        []int // their places in out
	)
	for i, d := range out {
		if !d.Pricing {
			contracts, gens, at = append(contracts, d.Contract), append(gens, d.Generation), append(at, i)
		}
	}
	if len(contracts) == 0 {
		return nil
	}
	var (
		n                       int
		contract                string
		old, promoted, switched int64
	)
	err := tx.ForEachRow(ctx, q(tables.SwitchSQL), []any{contracts, gens, false}, []any{&contract, &old, &promoted, &switched}, func() error {
		if n >= len(at) || contract != contracts[n] {
			return fmt.Errorf("%w: a row for contract %s, at %d", pricer.ErrCorrupt, contract, n)
		}
		d := &out[at[n]]
		if old != d.Current || promoted != 1 || switched != 1 {
			return fmt.Errorf("approving the preview of contract %s: %w: generation %d cannot supersede generation %d",
				d.Contract, pricer.ErrCorrupt, d.Generation, old)
		}
		d.Current = d.Generation
		n++
		return nil
	})
	if err == nil && n != len(at) {
		err = fmt.Errorf("%w: %d rows", pricer.ErrCorrupt, n)
	}
	if err != nil {
		return fmt.Errorf("approving %d previews: switching them to their new generations: %w", len(contracts), err)
	}
	return nil
}

// approveTiersSQL makes the tiers of the previews of contracts $1 theirs
// (their former tiers already deleted).
const approveTiersSQL = `
INSERT INTO {{.Schema}}.tiers (contract_id, threshold_minor, discount_bp)
SELECT g.contract_id, (t ->> 'threshold_minor')::bigint, (t ->> 'discount_bp')::integer
  FROM {{.Schema}}.generations g CROSS JOIN LATERAL jsonb_array_elements(g.tiers) AS t
 WHERE g.contract_id = ANY ($1::text[]) AND g.state = 'preview'
 ORDER BY 1, 2`

// applyPreviewAmendmentsSQL gives the records of contracts $1 the amounts
// their previews' amendments set (one UPDATE per chunk).
const applyPreviewAmendmentsSQL = `
WITH a AS (
    SELECT DISTINCT ON (a.contract_id, a.seq) a.contract_id, a.seq, a.new_amount_minor AS amount
      FROM {{.Schema}}.amendments a
      JOIN {{.Schema}}.generations g ON g.contract_id = a.contract_id AND g.generation = a.generation AND g.state = 'preview'
     WHERE a.contract_id = ANY ($1::text[]) AND a.preview
     ORDER BY a.contract_id, a.seq, a.amendment_id DESC
)
UPDATE {{.Schema}}.record_chunks c
   SET amounts = (SELECT array_agg(coalesce(x.amount, u.amount) ORDER BY u.i)
                    FROM unnest(c.amounts) WITH ORDINALITY AS u (amount, i)
                    LEFT JOIN a x ON x.contract_id = c.contract_id AND x.seq = c.first_seq + u.i - 1)
 WHERE c.contract_id = ANY ($1::text[])
   AND EXISTS (SELECT 1 FROM a WHERE a.contract_id = c.contract_id AND a.seq BETWEEN c.first_seq AND c.last_seq)`

// Discard is rerate.Store.DiscardTx (see there) in tx, for the pricing
// tables in schema schemaName.
func Discard(ctx context.Context, tx Tx, schemaName string, contracts []string) ([]Decided, error) {
	q := func(s string) string { return schema.SQL(schemaName, s) }
	keys, states, err := lockPreviews(ctx, tx, q, "discarding", contracts)
	if err != nil {
		return nil, err
	}
	out := make([]Decided, 0, len(keys))
	rewinds := make([]partition.Rewind, 0, len(keys))
	gens := make([]abandoned, len(keys))
	current := make([]int64, len(keys))
	for i, c := range keys {
		s := states[i]
		gens[i], current[i] = abandoned{c, s.generation}, s.current
		rewinds = append(rewinds, partition.Rewind{Key: c, Position: s.basePos, State: json.RawMessage(s.baseCP)})
		out = append(out, Decided{Contract: c, Generation: s.generation, Current: s.current})
	}
	previews := make([]int64, len(keys))
	for i, g := range gens {
		previews[i] = g.generation
	}
	if err := tx.Exec(ctx, q(`DELETE FROM {{.Schema}}.amendments a
 USING unnest($1::text[], $2::bigint[]) AS u(id, gen)
 WHERE a.contract_id = u.id AND a.generation = u.gen AND a.preview`), keys, previews); err != nil {
		return nil, fmt.Errorf("discarding %d previews: removing their amendments: %w", len(keys), err)
	}
	// The partitions go back to the current generation where it is priced
	// to: the rewind fences out a preview batch's claim (version + 1), and
	// the generation number is set back to the current one. The previews
	// are ended after it, once it holds their contracts' task rows,
	// segments included, as Start ends a generation it abandons: a split
	// preview's segment may have a batch in flight until then, which locks
	// the generation's row after its task row when it catches up.
	if _, err := tx.Rewind(ctx, schemaName, pricer.Kind, rewinds); err != nil {
		return nil, fmt.Errorf("discarding %d previews: moving their partitions back: %w", len(rewinds), err)
	}
	if err := setGenerations(ctx, tx, q, keys, current); err != nil {
		return nil, fmt.Errorf("discarding %d previews: %w", len(keys), err)
	}
	if err := abandon(ctx, tx, q, gens, "preview", "discarded"); err != nil {
		return nil, err
	}
	return out, nil
}
