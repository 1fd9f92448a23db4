package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/batonhq/baton/distributor"
	"github.com/batonhq/baton/pricer"
	"github.com/batonhq/baton/pricing"
)

// boundPricer does what pricer.Processor does, with one difference to
// measure: its reads and the priced rows go through the fenced
// transaction's database/sql handle with bound parameters (pgx sends the
// five arrays in binary) instead of bun's interpolation of every value into
// the SQL text. Its checkpoint is pricer's, so its output verifies the same
// way. It exists only for the profile experiment.
type boundPricer struct {
	mu        sync.Mutex
	schedules map[string]*pricing.Schedule
}

func newBoundPricer() *boundPricer { return &boundPricer{schedules: map[string]*pricing.Schedule{}} }

func (p *boundPricer) Process(ctx context.Context, b *distributor.Batch) (distributor.Result, error) {
	contract := b.Lease.Key
	tx := b.Tx.Tx
	var cp pricer.Checkpoint
	if len(b.Checkpoint.State) > 0 {
		if err := json.Unmarshal(b.Checkpoint.State, &cp); err != nil {
			return distributor.Result{}, fmt.Errorf("checkpoint of %s: %w", contract, err)
		}
	}
	sched, err := p.schedule(ctx, tx, contract)
	if err != nil {
		return distributor.Result{}, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT seq, record_id, amount_minor FROM records
		WHERE contract_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, contract, b.Checkpoint.Position, b.Limit)
	if err != nil {
		return distributor.Result{}, fmt.Errorf("reading records of %s: %w", contract, err)
	}
	cur, err := sched.Resume(cp.CumGross)
	if err != nil {
		rows.Close()
		return distributor.Result{}, err
	}
	var seqs, gross, disc, net []int64
	var ids []string
	for rows.Next() {
		var seq, amount int64
		var id string
		if err := rows.Scan(&seq, &id, &amount); err != nil {
			rows.Close()
			return distributor.Result{}, err
		}
		if want := b.Checkpoint.Position + int64(len(seqs)) + 1; seq != want {
			rows.Close()
			return distributor.Result{}, fmt.Errorf("contract %s: seq %d where %d was expected", contract, seq, want)
		}
		line, err := cur.Next(amount)
		if err != nil {
			rows.Close()
			return distributor.Result{}, err
		}
		seqs, ids = append(seqs, seq), append(ids, id)
		gross, disc, net = append(gross, line.Gross), append(disc, line.Discount), append(net, line.Net)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return distributor.Result{}, err
	}
	if len(seqs) == 0 {
		return distributor.Result{}, fmt.Errorf("contract %s: no records after %d", contract, b.Checkpoint.Position)
	}
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO priced (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by)
		SELECT $1, s, r, g, d, n, $2, $3
		FROM unnest($4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[]) AS u(s, r, g, d, n)`,
		contract, b.Lease.Version, b.Owner, seqs, ids, gross, disc, net); err != nil {
		return distributor.Result{}, fmt.Errorf("writing priced rows of %s: %w", contract, err)
	}
	exact, err := sched.ExactNet(cur.CumGross())
	if err != nil {
		return distributor.Result{}, err
	}
	state, err := json.Marshal(pricer.Checkpoint{CumGross: cur.CumGross(), CumNet: cur.CumNet(), CumNetExact: exact})
	if err != nil {
		return distributor.Result{}, err
	}
	return distributor.Result{Position: seqs[len(seqs)-1], State: state}, nil
}

func (p *boundPricer) schedule(ctx context.Context, tx *sql.Tx, contract string) (*pricing.Schedule, error) {
	p.mu.Lock()
	s, ok := p.schedules[contract]
	p.mu.Unlock()
	if ok {
		return s, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT threshold_minor, discount_bp FROM tiers WHERE contract_id = $1`, contract)
	if err != nil {
		return nil, fmt.Errorf("reading tiers of %s: %w", contract, err)
	}
	defer rows.Close()
	var tiers []pricing.Tier
	for rows.Next() {
		var t pricing.Tier
		if err := rows.Scan(&t.ThresholdMinor, &t.DiscountBP); err != nil {
			return nil, err
		}
		tiers = append(tiers, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if s, err = pricing.NewSchedule(tiers); err != nil {
		return nil, fmt.Errorf("tiers of %s: %w", contract, err)
	}
	p.mu.Lock()
	p.schedules[contract] = s
	p.mu.Unlock()
	return s, nil
}
