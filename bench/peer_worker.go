package main

// The peers: two simpler ways to distribute the same pricing job, each run
// as worker processes (this binary re-executed as "peer-worker"). Both use
// the real pricing engine, read the same records and tiers, and write the
// same priced table as baton; their checkpoint (position and cumulative
// gross per contract) lives in peer_queue.
//
//   - skiplocked: each transaction locks one contract's queue row with
//     SELECT … FOR UPDATE SKIP LOCKED, prices its next batch, advances the
//     checkpoint and commits. The row lock is the ownership, held for the
//     whole processing transaction.
//   - advisory: a session advisory lock per contract
//     (pg_try_advisory_lock), held on a pinned connection while the
//     contract is priced batch by batch, one transaction per batch.
//
// With --hardened the sessions carry server-side timeouts like baton's
// (statement 500ms, lock 250ms, idle in transaction 500ms, and for the
// advisory design idle session 1s), which is what it takes for the server
// to end the session of a stopped process.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/batonhq/baton/pricing"
)

// preparePeerQueue creates the peers' queue table from the task rows the
// loader created (one per contract, with its record count).
func preparePeerQueue(ctx context.Context, db *bun.DB) error {
	for _, stmt := range []string{
		`CREATE TABLE peer_queue (
			contract_id text COLLATE "C" PRIMARY KEY,
			lock_key    bigint NOT NULL UNIQUE,
			position    bigint NOT NULL DEFAULT 0,
			available   bigint NOT NULL,
			cum_gross   bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO peer_queue (contract_id, lock_key, available)
		 SELECT partition_key, row_number() OVER (ORDER BY partition_key), available FROM baton.tasks
		  WHERE kind = 'pricing' AND segment_of IS NULL`,
		`CREATE INDEX peer_queue_pending ON peer_queue (contract_id) WHERE position < available`,
		`ANALYZE peer_queue`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("preparing peer_queue: %w", err)
		}
	}
	return nil
}

type peerOptions struct {
	design      string
	id          string
	url         string
	batch       int
	concurrency int
	untilDone   bool
	poll        time.Duration
	hardened    bool
}

// peerWorkerMain is the peer-worker subcommand.
func peerWorkerMain(args []string) int {
	var o peerOptions
	fs := flag.NewFlagSet("peer-worker", flag.ContinueOnError)
	fs.StringVar(&o.design, "design", "", "skiplocked or advisory")
	fs.StringVar(&o.id, "id", "peer", "worker id (application_name and priced_by)")
	fs.StringVar(&o.url, "database-url", os.Getenv("DATABASE_URL"), "database URL")
	fs.IntVar(&o.batch, "batch-size", 1000, "records per transaction")
	fs.IntVar(&o.concurrency, "concurrency", 8, "contracts processed at once (one connection each)")
	fs.BoolVar(&o.untilDone, "until-done", false, "exit once no contract has pending records")
	fs.DurationVar(&o.poll, "poll", 200*time.Millisecond, "wait before looking again when nothing is claimable")
	fs.BoolVar(&o.hardened, "hardened", false, "server-side session timeouts like baton's at --stale-after 1s")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("worker", o.id, "design", o.design)
	if o.design != "skiplocked" && o.design != "advisory" {
		log.Error("unknown design", "design", o.design)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w := &peer{o: o, log: log, schedules: map[string]*pricing.Schedule{}}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, i)
		}()
	}
	wg.Wait()
	log.Info("worker exiting", "event", "done", "records", w.records.Load(), "batches", w.batches.Load(),
		"errors", w.errors.Load(), "elapsed_ms", time.Since(start).Milliseconds())
	return 0
}

type peer struct {
	o         peerOptions
	log       *slog.Logger
	mu        sync.Mutex
	schedules map[string]*pricing.Schedule
	records   atomic.Int64
	batches   atomic.Int64
	errors    atomic.Int64
}

func (w *peer) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(w.o.url)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL: %w", err)
	}
	cfg.RuntimeParams["application_name"] = w.o.id
	if w.o.hardened {
		cfg.RuntimeParams["statement_timeout"] = "500"
		cfg.RuntimeParams["lock_timeout"] = "250"
		cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "500"
		if w.o.design == "advisory" {
			cfg.RuntimeParams["idle_session_timeout"] = "1000"
		}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// loop runs one connection's worth of work until done, reconnecting after
// errors (a killed session, a timeout).
func (w *peer) loop(ctx context.Context, slot int) {
	for ctx.Err() == nil {
		conn, err := w.connect(ctx)
		if err != nil {
			w.errors.Add(1)
			w.log.Warn("connect failed", "slot", slot, "error", err)
			sleep(ctx, w.o.poll)
			continue
		}
		var done bool
		if w.o.design == "skiplocked" {
			done, err = w.skipLocked(ctx, conn)
		} else {
			done, err = w.advisory(ctx, conn, slot)
		}
		conn.Close(context.Background())
		if done {
			return
		}
		if err != nil && ctx.Err() == nil {
			w.errors.Add(1)
			w.log.Warn("session failed; reconnecting", "event", "session_error", "slot", slot, "error", err)
			sleep(ctx, w.o.poll)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// anyPending reports whether any contract has unpriced records, locked or
// not.
func anyPending(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var b bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM peer_queue WHERE position < available)`).Scan(&b)
	return b, err
}

// skipLocked prices one batch per transaction, the contract's queue row
// locked for the whole transaction. It returns done once nothing is left.
func (w *peer) skipLocked(ctx context.Context, conn *pgx.Conn) (done bool, err error) {
	for ctx.Err() == nil {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return false, err
		}
		var contract string
		var pos, cum int64
		err = tx.QueryRow(ctx, `
			SELECT contract_id, position, cum_gross FROM peer_queue
			WHERE position < available
			ORDER BY contract_id LIMIT 1
			FOR UPDATE SKIP LOCKED`).Scan(&contract, &pos, &cum)
		if errors.Is(err, pgx.ErrNoRows) {
			_ = tx.Rollback(ctx)
			more, err := anyPending(ctx, conn)
			if err != nil {
				return false, err
			}
			if !more && w.o.untilDone {
				return true, nil
			}
			sleep(ctx, w.o.poll)
			continue
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return false, err
		}
		if err := w.batch(ctx, tx, contract, pos, cum); err != nil {
			_ = tx.Rollback(ctx)
			return false, err
		}
		if err := tx.Commit(ctx); err != nil {
			return false, err
		}
	}
	return false, ctx.Err()
}

// advisory takes a session advisory lock on a pending contract and prices
// it to the end, one transaction per batch, then unlocks it.
func (w *peer) advisory(ctx context.Context, conn *pgx.Conn, slot int) (done bool, err error) {
	for ctx.Err() == nil {
		rows, err := conn.Query(ctx, `
			SELECT contract_id, lock_key FROM peer_queue
			WHERE position < available ORDER BY random() LIMIT 32`)
		if err != nil {
			return false, err
		}
		type cand struct {
			key  string
			lock int64
		}
		var cands []cand
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.key, &c.lock); err != nil {
				rows.Close()
				return false, err
			}
			cands = append(cands, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return false, err
		}
		if len(cands) == 0 && w.o.untilDone {
			return true, nil
		}
		got := false
		for _, c := range cands {
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, c.lock).Scan(&ok); err != nil {
				return false, err
			}
			if !ok {
				continue
			}
			got = true
			if err := w.drain(ctx, conn, c.key); err != nil {
				return false, err
			}
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, c.lock); err != nil {
				return false, err
			}
			break
		}
		if !got {
			sleep(ctx, w.o.poll)
		}
	}
	return false, ctx.Err()
}

// drain prices a locked contract to its end.
func (w *peer) drain(ctx context.Context, conn *pgx.Conn, contract string) error {
	for ctx.Err() == nil {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		var pos, avail, cum int64
		if err := tx.QueryRow(ctx, `SELECT position, available, cum_gross FROM peer_queue WHERE contract_id = $1`,
			contract).Scan(&pos, &avail, &cum); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if pos >= avail {
			return tx.Rollback(ctx)
		}
		if err := w.batch(ctx, tx, contract, pos, cum); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// batch prices the next records of contract after pos (cumulative gross
// cum) inside tx and advances its checkpoint.
func (w *peer) batch(ctx context.Context, tx pgx.Tx, contract string, pos, cum int64) error {
	sched, err := w.schedule(ctx, tx, contract)
	if err != nil {
		return err
	}
	// The records of the chunks covering (pos, pos+batch], found on the
	// chunks' primary key as baton's pricer finds them (a seq predicate on
	// the records view would unnest every chunk of the contract).
	rows, err := tx.Query(ctx, `SELECT c.first_seq + u.i - 1 AS seq, u.record_id, u.amount_minor
		FROM baton.record_chunks c
		CROSS JOIN LATERAL unnest(c.record_ids, c.amounts) WITH ORDINALITY AS u (record_id, amount_minor, i)
		WHERE c.contract_id = $1
		  AND c.first_seq >= coalesce((SELECT max(first_seq) FROM baton.record_chunks
		                                WHERE contract_id = $1 AND first_seq <= $2 + 1), 1)
		  AND c.first_seq <= $2 + $3 AND c.first_seq + u.i - 1 > $2
		ORDER BY 1 LIMIT $3`, contract, pos, w.o.batch)
	if err != nil {
		return fmt.Errorf("reading records of %s: %w", contract, err)
	}
	var seqs, gross, disc, net []int64
	var ids []string
	cur, err := sched.Resume(cum)
	if err != nil {
		rows.Close()
		return err
	}
	for rows.Next() {
		var seq, amount int64
		var id string
		if err := rows.Scan(&seq, &id, &amount); err != nil {
			rows.Close()
			return err
		}
		if seq != pos+int64(len(seqs))+1 {
			rows.Close()
			return fmt.Errorf("contract %s: seq %d after checkpoint %d", contract, seq, pos)
		}
		line, err := cur.Next(amount)
		if err != nil {
			rows.Close()
			return err
		}
		seqs, ids = append(seqs, seq), append(ids, id)
		gross, disc, net = append(gross, line.Gross), append(disc, line.Discount), append(net, line.Net)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(seqs) == 0 {
		return fmt.Errorf("contract %s: no records after %d", contract, pos)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO baton.priced_rows (contract_id, seq, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, generation)
		SELECT $1, s, r, g, d, n, 0, $2, 1
		FROM unnest($3::bigint[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[]) AS u(s, r, g, d, n)`,
		contract, w.o.id, seqs, ids, gross, disc, net); err != nil {
		return fmt.Errorf("writing priced rows of %s: %w", contract, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE peer_queue SET position = $2, cum_gross = $3 WHERE contract_id = $1`,
		contract, seqs[len(seqs)-1], cur.CumGross()); err != nil {
		return fmt.Errorf("advancing %s: %w", contract, err)
	}
	w.records.Add(int64(len(seqs)))
	w.batches.Add(1)
	return nil
}

func (w *peer) schedule(ctx context.Context, tx pgx.Tx, contract string) (*pricing.Schedule, error) {
	w.mu.Lock()
	s, ok := w.schedules[contract]
	w.mu.Unlock()
	if ok {
		return s, nil
	}
	rows, err := tx.Query(ctx, `SELECT threshold_minor, discount_bp FROM baton.tiers WHERE contract_id = $1`, contract)
	if err != nil {
		return nil, fmt.Errorf("reading tiers of %s: %w", contract, err)
	}
	tiers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pricing.Tier, error) {
		var t pricing.Tier
		err := r.Scan(&t.ThresholdMinor, &t.DiscountBP)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading tiers of %s: %w", contract, err)
	}
	if s, err = pricing.NewSchedule(tiers); err != nil {
		return nil, fmt.Errorf("tiers of %s: %w", contract, err)
	}
	w.mu.Lock()
	w.schedules[contract] = s
	w.mu.Unlock()
	return s, nil
}
