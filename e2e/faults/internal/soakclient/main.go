// Command soakclient is a helper program of the fault-injection soak
// (faults.TestSoak). It exercises what the worker command cannot: leader
// election (package leader) and entity locks (package lock), and it is the
// command the soak's scheduled jobs run. Every one of its actions leaves
// evidence that the soak's checker reads afterwards, independently of the
// packages under test:
//
//	soakclient run --id NAME    campaign for one leadership and, while leader,
//	                            commit fenced writes to soak.leader_writes;
//	                            meanwhile take entity locks and record each
//	                            hold in soak.lock_holds. Until SIGTERM.
//	soakclient job --out FILE   a scheduled job's command: append a start
//	                            line, work a while, append an end line.
//
// The database comes from DATABASE_URL. The evidence tables are created by
// the soak (schema soak), not here.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/uptrace/bun"

	"github.com/batonhq/baton/dbconn"
	"github.com/batonhq/baton/leader"
	"github.com/batonhq/baton/lock"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: soakclient run|job [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runClient(os.Args[2:])
	case "job":
		err = runJob(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakclient:", err)
		os.Exit(1)
	}
}

// LeadershipName is the one leadership every client campaigns for.
const LeadershipName = "soak"

type clientOptions struct {
	id         string
	heartbeat  time.Duration
	staleAfter time.Duration
	confirm    int
	keys       []string
	resignP    float64
	writeEvery time.Duration
}

func runClient(args []string) error {
	var o clientOptions
	var keys string
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&o.id, "id", "client", "name; the owner is NAME#random")
	fs.DurationVar(&o.heartbeat, "heartbeat", 100*time.Millisecond, "lease renewal interval")
	fs.DurationVar(&o.staleAfter, "stale-after", time.Second, "lease length")
	fs.IntVar(&o.confirm, "confirm", 3, "renewals a takeover waits for")
	fs.StringVar(&keys, "keys", "adv:0,adv:1,row:0,row:1", "lock keys; the prefix before ':' is the method (adv or row)")
	fs.Float64Var(&o.resignP, "resign", 0.01, "probability that a leader resigns after a write")
	fs.DurationVar(&o.writeEvery, "write-every", 20*time.Millisecond, "pause between a leader's writes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.keys = strings.Split(keys, ",")
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	// The worker's connection limits: a cut-off client's open transaction
	// (and the locks it holds) is ended by the server.
	db, err := dbconn.Open(url, dbconn.Options{ApplicationName: "soakclient", StatementTimeout: o.staleAfter / 2,
		LockTimeout: o.staleAfter / 4, IdleInTransactionTimeout: o.staleAfter / 2, MaxOpenConns: 8})
	if err != nil {
		return err
	}
	defer db.Close()
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var b [4]byte
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	instance := fmt.Sprintf("%s#%x", o.id, b)
	log.Info("soak client started", "event", "started", "instance", instance)

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); lead(ctx, db, o, instance, log) }()
	go func() { defer wg.Done(); lockLoop(ctx, db.DB, o, instance, log) }()
	wg.Wait()
	log.Info("soak client stopping", "event", "stopped")
	return nil
}

// lead campaigns, and while elected commits fenced writes: each locks the
// soak's register row, takes the next sequence number from it, and records
// (seq, token, owner). The register's row lock orders the writes by
// commit, so seq is commit order; the checker verifies that tokens never
// go down in it.
func lead(ctx context.Context, db *dbconn.DB, o clientOptions, instance string, log *slog.Logger) {
	e, err := leader.New(db, leader.Config{InstanceID: instance, Heartbeat: o.heartbeat, StaleAfter: o.staleAfter,
		Confirm: o.confirm, Logger: log})
	if err != nil {
		log.Error("elector", "event", "error", "error", err)
		return
	}
	if err := e.Start(context.WithoutCancel(ctx)); err != nil {
		log.Error("elector start", "event", "error", "error", err)
		return
	}
	defer e.Stop()
	for ctx.Err() == nil {
		l, err := e.Campaign(ctx, LeadershipName)
		if err != nil {
			continue // ctx ended, or Campaign logged the failure and retries
		}
		log.Info("leading", "event", "leading", "token", l.Token)
		leadTerm(ctx, db.DB, o, instance, l, log)
	}
}

func leadTerm(ctx context.Context, db *bun.DB, o clientOptions, instance string, l *leader.Leadership, log *slog.Logger) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.Background(), o.staleAfter)
			_ = l.Resign(rctx)
			cancel()
			return
		case <-l.Done():
			log.Info("leadership ended", "event", "lost", "token", l.Token, "cause", context.Cause(l.Context()).Error())
			return
		case <-timer.C:
		}
		err := leaderWrite(l.Context(), db, o, instance, l)
		switch {
		case errors.Is(err, leader.ErrNotLeader):
			log.Info("fenced write refused", "event", "fenced", "token", l.Token)
		case err != nil:
			log.Debug("leader write failed", "event", "error", "token", l.Token, "error", err)
		case rand.Float64() < o.resignP:
			rctx, cancel := context.WithTimeout(ctx, o.staleAfter)
			err := l.Resign(rctx)
			cancel()
			log.Info("resigned", "event", "resigned", "token", l.Token, "error", errString(err))
			return
		}
		timer.Reset(o.writeEvery)
	}
}

func leaderWrite(ctx context.Context, db *bun.DB, o clientOptions, instance string, l *leader.Leadership) error {
	ctx, cancel := context.WithTimeout(ctx, o.staleAfter)
	defer cancel()
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := l.Check(ctx, tx); err != nil {
			return err
		}
		var seq int64
		if err := tx.QueryRowContext(ctx, `SELECT seq FROM soak.leader_register WHERE id = 1 FOR UPDATE`).Scan(&seq); err != nil {
			return err
		}
		seq++
		if _, err := tx.ExecContext(ctx, `UPDATE soak.leader_register SET seq = ?, token = ?, owner = ? WHERE id = 1`,
			seq, l.Token, instance); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO soak.leader_writes (seq, token, owner, written_at)
			VALUES (?, ?, ?, clock_timestamp())`, seq, l.Token, instance)
		return err
	})
}

// lockLoop takes one key's lock at a time and, holding it, does a
// read-modify-write of the key's counter without any other protection
// (read, pause, write back read+1) and records the hold: its interval on
// the database clock and the counter value written. Two holders at once
// would show as overlapping intervals and as a lost update (two holds
// writing the same value).
func lockLoop(ctx context.Context, db *bun.DB, o clientOptions, instance string, log *slog.Logger) {
	for ctx.Err() == nil {
		key := o.keys[rand.IntN(len(o.keys))]
		method := lock.MethodAdvisory
		if strings.HasPrefix(key, "row:") {
			method = lock.MethodRow
		}
		err := lockOnce(ctx, db, o, instance, key, method)
		if err != nil && ctx.Err() == nil {
			log.Debug("lock hold failed", "event", "error", "key", key, "error", err)
		}
		sleep(ctx, time.Duration(rand.IntN(20))*time.Millisecond)
	}
}

func lockOnce(ctx context.Context, db *bun.DB, o clientOptions, instance, key string, method lock.Method) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*o.staleAfter)
	defer cancel()
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if err := lock.Acquire(ctx, tx, key, lock.Options{Method: method, Timeout: o.staleAfter / 4}); err != nil {
			return err
		}
		var n int64
		var start time.Time
		if err := tx.QueryRowContext(ctx, `SELECT n, clock_timestamp() FROM soak.lock_counters WHERE key = ?`, key).Scan(&n, &start); err != nil {
			return err
		}
		time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond) // the critical section's work
		n++
		if _, err := tx.ExecContext(ctx, `UPDATE soak.lock_counters SET n = ? WHERE key = ?`, n, key); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO soak.lock_holds (key, holder, n, held_from, held_to)
			VALUES (?, ?, ?, ?, clock_timestamp())`, key, instance, n, start)
		return err
	})
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// JobLine is one line of a job's evidence file.
type JobLine struct {
	Event  string `json:"ev"` // start or end
	Job    string `json:"job"`
	Slot   string `json:"slot"`
	Fence  int64  `json:"fence"`
	Worker string `json:"worker"`
	PID    int    `json:"pid"`
	At     int64  `json:"at"`               // Unix nanoseconds, this machine's clock
	How    string `json:"how,omitempty"`    // end: ok or term
	Key    string `json:"ikey,omitempty"`   // start: the idempotency key
	Sleep  int64  `json:"sleep,omitempty"`  // start: planned work, ms
	Reason string `json:"reason,omitempty"` // end: the signal, if any
}

func runJob(args []string) error {
	fs := flag.NewFlagSet("job", flag.ContinueOnError)
	out := fs.String("out", "", "evidence file to append to")
	lo := fs.Duration("min", 50*time.Millisecond, "shortest work")
	hi := fs.Duration("max", 300*time.Millisecond, "longest work")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("job: --out is required")
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	fence, _ := strconv.ParseInt(os.Getenv("BATON_FENCE"), 10, 64)
	base := JobLine{Job: os.Getenv("BATON_JOB"), Slot: os.Getenv("BATON_SLOT"), Fence: fence,
		Worker: os.Getenv("BATON_WORKER"), PID: os.Getpid()}
	work := *lo
	if *hi > *lo {
		work += time.Duration(rand.Int64N(int64(*hi - *lo)))
	}
	start := base
	start.Event, start.At, start.Key, start.Sleep = "start", time.Now().UnixNano(), os.Getenv("BATON_IDEMPOTENCY_KEY"), work.Milliseconds()
	if err := appendLine(*out, start); err != nil {
		return err
	}
	end := base
	end.Event, end.How = "end", "ok"
	timer := time.NewTimer(work)
	select {
	case <-timer.C:
	case sig := <-term:
		end.How, end.Reason = "term", sig.String()
	}
	end.At = time.Now().UnixNano()
	if err := appendLine(*out, end); err != nil {
		return err
	}
	if end.How != "ok" {
		os.Exit(143)
	}
	return nil
}

// appendLine appends one JSON line with a single write to a file opened
// with O_APPEND, so lines of concurrent runs never interleave.
func appendLine(path string, l JobLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
