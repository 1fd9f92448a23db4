package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/uptrace/bun"
)

// design is one way of distributing the pricing job over worker processes:
// baton, or one of the peers implemented in peer_worker.go.
type design struct {
	Name string
	// peer is the peer-worker --design value; "" for baton.
	peer     string
	hardened bool
	noEvents bool // baton without its events table
}

var (
	designBaton      = design{Name: "baton"}
	designSkipLocked = design{Name: "skiplocked", peer: "skiplocked"}
	designAdvisory   = design{Name: "advisory", peer: "advisory"}
	designSkipHard   = design{Name: "skiplocked+timeouts", peer: "skiplocked", hardened: true}
	designAdvHard    = design{Name: "advisory+timeouts", peer: "advisory", hardened: true}
)

// timing is a baton worker's lease timing.
type timing struct {
	Heartbeat  string `json:"heartbeat"`
	StaleAfter string `json:"stale_after"`
	Confirm    int    `json:"confirm"`
}

var (
	timingFast    = timing{"200ms", "1s", 3}
	timingDefault = timing{"1s", "10s", 3}
)

func (t timing) args() []string {
	return []string{"--heartbeat", t.Heartbeat, "--stale-after", t.StaleAfter, "--confirm", strconv.Itoa(t.Confirm)}
}

func (t timing) String() string {
	return fmt.Sprintf("--heartbeat %s --stale-after %s --confirm %d", t.Heartbeat, t.StaleAfter, t.Confirm)
}

// workerArgs are the arguments of one worker of design d. batch 0 keeps the
// default batch size; tm applies to baton only.
func (d design) workerArgs(batch int, tm *timing, conc int) []string {
	args := []string{"--until-done"}
	if batch > 0 {
		args = append(args, "--batch-size", strconv.Itoa(batch))
	}
	if d.peer == "" {
		if tm != nil {
			args = append(args, tm.args()...)
		}
		if d.noEvents {
			args = append(args, "--events=false")
		}
		return args
	}
	args = append(args, "--concurrency", strconv.Itoa(conc))
	if d.hardened {
		args = append(args, "--hardened")
	}
	return args
}

// startWorker starts worker id of design d on database dbURL.
func (e *env) startWorker(d design, dbURL, logDir, id string, args []string) (*proc, error) {
	if d.peer == "" {
		return e.startBaton(dbURL, logDir, id, args...)
	}
	return e.startPeer(dbURL, logDir, id, d.peer, args...)
}

// commandFor renders the command line of a worker for the report.
func (e *env) commandFor(d design, id string, args []string) string {
	if d.peer == "" {
		return commandLine("<tmp>/worker", append([]string{"run", "--id", id, "--log-format", "json"}, args...))
	}
	return commandLine("<bench>", append([]string{"peer-worker", "--design", d.peer, "--id", id}, args...))
}

// prepare readies a fresh copy of a data set for design d.
func (d design) prepare(ctx context.Context, db *bun.DB) error {
	if d.peer == "" {
		return nil
	}
	return preparePeerQueue(ctx, db)
}

// held returns the contracts that worker id holds and that still have
// pending work, each with its committed position: the contracts another
// worker has to resume if id dies.
func (d design) held(ctx context.Context, db bun.IDB, id string) (map[string]int64, error) {
	var q string
	switch d.peer {
	case "":
		q = `SELECT partition_key, position FROM baton.tasks
		     WHERE owner LIKE ? || '#%' AND position < available`
	case "skiplocked":
		// A row locked FOR UPDATE carries the locker's xid in xmax.
		q = `SELECT q.contract_id, q.position FROM peer_queue q
		     JOIN pg_stat_activity a ON a.backend_xid = q.xmax AND a.datname = current_database()
		     WHERE a.application_name = ? AND q.position < q.available`
	case "advisory":
		// pg_try_advisory_lock(bigint k) with k < 2^32 shows as classid 0,
		// objid k, objsubid 1.
		q = `SELECT q.contract_id, q.position FROM peer_queue q
		     JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objsubid = 1
		          AND l.objid::bigint = q.lock_key
		          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		     JOIN pg_stat_activity a ON a.pid = l.pid
		     WHERE a.application_name = ? AND q.position < q.available`
	default:
		return nil, fmt.Errorf("unknown design %q", d.peer)
	}
	rows, err := db.QueryContext(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("reading contracts held by %s: %w", id, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var pos int64
		if err := rows.Scan(&k, &pos); err != nil {
			return nil, fmt.Errorf("reading contracts held by %s: %w", id, err)
		}
		out[k] = pos
	}
	return out, rows.Err()
}

// pending is the number of records not yet priced.
func (d design) pending(ctx context.Context, db bun.IDB) (int64, error) {
	table, col := "baton.tasks", "available - position"
	if d.peer != "" {
		table = "peer_queue"
	}
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT coalesce(sum("+col+"), 0) FROM "+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("reading pending records: %w", err)
	}
	return n, nil
}
