package taskstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonhq/baton/internal/notify"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/partition"
	"github.com/uptrace/bun"
)

// Unowned partitions claimed with their first batches, alone or several in
// one transaction: FenceUnownedGroup fences them all in one statement, the
// processor writes every member's output, and ClaimAdvanceGroup claims
// them all (and records their checkpoints, history and, in lock mode,
// their releases) in one more. A lone candidate is a group of one: each
// member's row goes through the same predicates, the same lock modes and
// the same compare-and-sets whatever the group's size.

// ErrClaimLost is returned by ClaimAdvanceGroup when a candidate was not
// won (FenceUnownedGroup leaves such a candidate out of its result): its
// version moved (someone else claimed it), it is no longer claimable,
// another transaction holds its row in a conflicting mode, or it names an
// owner (a takeover, which must be claimed with Claim and confirmed).
var ErrClaimLost = errors.New("claim lost: the candidate is no longer claimable at the version read")

// claimLockClass is the first key of the transaction-scoped advisory lock
// (class, hash of the partition key) that FenceUnownedGroup takes on each
// candidate so that two claim transactions do not both process the same
// partition: it lives in the two-key space, apart from bigint advisory
// keys (package lock, loads).
const claimLockClass = 0x62746e31

// Fenced is a candidate fenced by FenceUnownedGroup, with the checkpoint
// read under the fence.
type Fenced struct {
	Candidate
	Checkpoint partition.Checkpoint
}

// FenceUnownedGroup is InTx(tx, "").FenceUnownedGroup(ctx, cands, limit).
func (s *Store) FenceUnownedGroup(ctx context.Context, tx bun.Tx, cands []Candidate, limit int) ([]Fenced, error) {
	return s.InTx(tx, "").FenceUnownedGroup(ctx, cands, limit)
}

// FenceUnownedGroup is the fence of claims' first batches, for partitions
// nobody owns (never owned, or released), inside tx, before the claim, in
// one statement: it tries the candidates in partition_key order and fences
// each that is still the candidate (same version, no owner) and claimable,
// until it has fenced limit of them (all it can if limit <= 0), and returns
// those (in that order) with their checkpoints. A candidate tried but
// missing from the result was lost: another claim transaction, or a change
// of ownership, holds it or moved it; those after the limit was reached
// were not tried.
//
// Each row is locked FOR KEY SHARE SKIP LOCKED. Until tx ends no change of
// ownership can commit on it (they all lock FOR UPDATE, which conflicts
// with FOR KEY SHARE; Claim skips it), while producers (FOR NO KEY UPDATE)
// still add work without waiting. The claim itself comes at the end of the
// batch, in ClaimAdvanceGroup, a compare-and-set on the version read here.
//
// FOR KEY SHARE does not exclude another claim transaction's fence, so the
// fence also takes a transaction-scoped advisory lock on each partition
// (before its row lock), without waiting (the candidate is lost if another
// claim transaction holds it): two workers racing for one partition do not
// both process it, only for one to lose at ClaimAdvanceGroup. Safety does
// not rest on it (two keys sharing a hash only exclude each other):
// ClaimAdvanceGroup's compare-and-set decides. One candidate at a time,
// the statement never waits for a lock, so two workers fencing overlapping
// groups cannot deadlock, and a candidate another worker is fencing is
// passed over rather than waited for.
func (t Txn) FenceUnownedGroup(ctx context.Context, cands []Candidate, limit int) ([]Fenced, error) {
	if len(cands) == 0 {
		return nil, nil
	}
	if limit <= 0 || limit > len(cands) {
		limit = len(cands)
	}
	sorted := slices.SortedFunc(slices.Values(cands), func(a, b Candidate) int { return strings.Compare(a.Key, b.Key) })
	keys := make([]string, len(sorted))
	versions := make([]int64, len(sorted))
	for i, c := range sorted {
		keys[i], versions[i] = c.Key, c.Version
	}
	rows, err := t.s.queryTx(ctx, t.tx, fenceUnownedGroupSQL, keys, versions, claimLockClass, limit, t.s.kind)
	if err != nil {
		return nil, fmt.Errorf("fencing %d partitions for their claim: %w", len(cands), err)
	}
	defer rows.Close()
	out := make([]Fenced, 0, len(cands))
	for rows.Next() {
		var f Fenced
		var state []byte
		if err := rows.Scan(&f.Key, &f.Version, &f.Checkpoint.Position, &f.Checkpoint.Available, &state,
			&f.Checkpoint.Traceparent, &f.Checkpoint.Generation); err != nil {
			return nil, fmt.Errorf("fencing %d partitions for their claim: %w", len(cands), err)
		}
		f.Checkpoint.State = state
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fencing %d partitions for their claim: %w", len(cands), err)
	}
	slices.SortFunc(out, func(a, b Fenced) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// ClaimStep is one member of ClaimAdvanceGroup: a candidate fenced in the
// same transaction, the checkpoint its first batch moves From → Position
// with State, and whether to release it again (lock mode, caught up, or
// beyond the room of its claim) and why (Reason; empty for the
// statement's reason). Traceparent is the W3C trace context of the
// member's batch, stored with its checkpoint; empty means the span in the
// statement's context.
type ClaimStep struct {
	Candidate   Candidate
	From        int64
	Position    int64
	State       json.RawMessage
	Release     bool
	Reason      string
	Traceparent string
}

// ClaimAdvanceGroup is InTx(tx, owner).ClaimAdvanceGroup(ctx, ttl, steps,
// reason).
func (s *Store) ClaimAdvanceGroup(ctx context.Context, tx bun.Tx, owner string, ttl time.Duration,
	steps []ClaimStep, reason string) ([]partition.Lease, error) {
	return s.InTx(tx, owner).ClaimAdvanceGroup(ctx, ttl, steps, reason)
}

// ClaimAdvanceGroup ends the first batches of unowned partitions fenced by
// FenceUnownedGroup in the same transaction, in one statement, all or nothing: for
// each step Claim's compare-and-set (FOR UPDATE SKIP LOCKED, version still
// the candidate's, no owner, claimable), Advance's checkpoint
// compare-and-set (position still From), and, with Release, ReleaseFor's
// hand-back (claimable at once, waiting workers notified at commit if work
// is still pending). A claim's version is the candidate's Version+1; the
// lease runs for ttl from this statement's arrival (statement_timestamp(),
// not the transaction's start, which may be a long batch earlier: nothing
// renews the lease before the claim commits), so a caller's local deadline
// counts from the moment it sent this statement. A release bumps the
// version once more. The worker's held count rises by the members kept
// (no release), as Claim raises it. The history gets "claimed",
// "first_batch" and, with release, "released" (with reason), all under the
// claim's version.
//
// It returns the members' leases (in the steps' order), or ErrClaimLost if
// any member was not won (another transaction fences the row too, or the
// row moved): tx must then roll back, with every member's output.
// Everything commits together or not at all.
func (t Txn) ClaimAdvanceGroup(ctx context.Context, ttl time.Duration, steps []ClaimStep, reason string) ([]partition.Lease, error) {
	n := len(steps)
	if n == 0 {
		return nil, nil
	}
	keys := make([]string, n)
	versions := make([]int64, n)
	froms := make([]int64, n)
	positions := make([]int64, n)
	states := make([]string, n)
	releases := make([]bool, n)
	traces := make([]string, n)
	reasons := make([]string, n)
	leases := make([]partition.Lease, n)
	trace := traceparent(ctx)
	for i, st := range steps {
		keys[i], versions[i] = st.Candidate.Key, st.Candidate.Version
		froms[i], positions[i], releases[i] = st.From, st.Position, st.Release
		states[i] = "{}"
		if st.State != nil {
			states[i] = string(st.State)
		}
		traces[i] = st.Traceparent
		if traces[i] == "" {
			traces[i] = trace
		}
		reasons[i] = cmp.Or(st.Reason, reason)
		leases[i] = partition.Lease{Key: st.Candidate.Key, Version: st.Candidate.Version + 1}
	}
	q := claimAdvanceGroupSQL
	args := []any{keys, versions, froms, positions, states, releases, t.owner, micros(ttl), traces, notify.Channel,
		t.s.kind, notify.Payload(notify.Released, t.s.kind)}
	if !t.s.noEvents {
		q, args = claimAdvanceGroupEventsSQL, append(args, reasons)
	}
	rows, err := t.s.queryTx(ctx, t.tx, q, args...)
	var won int
	if err == nil {
		err = scanCount(rows, &won)
	}
	if err != nil {
		return leases, fmt.Errorf("claiming %s with its first batch: %w", groupName(steps, leases), err)
	}
	if won != n {
		return leases, fmt.Errorf("claiming %s with its first batch (%d of %d won): %w", groupName(steps, leases), won, n, ErrClaimLost)
	}
	return leases, nil
}

// groupName names a group's leases in errors: for a group of one, the
// lease and its checkpoint's move.
func groupName(steps []ClaimStep, leases []partition.Lease) string {
	if len(leases) == 1 {
		return fmt.Sprintf("%s (checkpoint %d to %d)", leases[0], steps[0].From, steps[0].Position)
	}
	return fmt.Sprintf("%d partitions (%s, …)", len(leases), leases[0])
}

// fenceUnownedGroupSQL fences candidates of kind $5 (keys $1, versions
// $2, in key order) with advisory locks of class $3, at most $4 of them.
// The lateral subquery is the fence's predicate, run once per candidate
// in array order through the primary key, so the advisory lock is tried
// only on a row that matched the rest of it; nothing sorts the result (the
// caller does), so the limit stops the statement at the last row it needs
// and no candidate past it is locked. The lock's key hashes the kind and
// the key (a kind has no spaces), so claims of other kinds' partitions of
// the same name do not pass each other over.
const fenceUnownedGroupSQL = `
		SELECT f.partition_key, f.version, f.position, f.available, f.checkpoint, f.traceparent, f.generation
		FROM unnest($1::text[], $2::bigint[]) AS c(key, version)
		CROSS JOIN LATERAL (
			SELECT t.partition_key, t.version, t.position, t.available, t.checkpoint,
			       coalesce(t.traceparent, '') AS traceparent, t.generation
			FROM {{.Schema}}.tasks t
			WHERE t.kind = $5 AND t.partition_key = c.key AND t.version = c.version AND t.owner IS NULL
			  AND t.available > t.position AND t.failed_at IS NULL AND t.lease_expires_at <= now()
			  AND ` + notPausedT + `
			  AND pg_try_advisory_xact_lock($3, hashtext(t.kind || ' ' || t.partition_key))
			FOR KEY SHARE OF t SKIP LOCKED
		) f
		LIMIT $4`

// claimAdvanceGroupSQL claims the members (kind $11, keys $1, versions $2)
// moving their checkpoints from $3 to $4 with states $5, releasing those
// marked in $6, for owner $7 with leases of $8 microseconds; $9 are the
// trace contexts stored with the checkpoints, $10 the notification channel
// and $12 the payload of a release. It returns how many members were won.
const claimAdvanceGroupSQL = claimAdvanceGroupCTEs + `
		SELECT count(*) FROM u CROSS JOIN n`

// claimAdvanceGroupCTEs are claimAdvanceGroupSQL's steps.
const claimAdvanceGroupCTEs = `
		WITH c AS (
			SELECT l.partition_key, m.version + 1 AS version, m.from_pos, m.position, m.checkpoint, m.release, m.trace
			FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::boolean[], $9::text[])
			     AS m(key, version, from_pos, position, checkpoint, release, trace)
			CROSS JOIN LATERAL (
				SELECT t.partition_key
				FROM {{.Schema}}.tasks t
				WHERE t.kind = $11 AND t.partition_key = m.key AND t.version = m.version AND t.owner IS NULL
				  AND t.position = m.from_pos
				  AND t.available > t.position AND t.failed_at IS NULL AND t.lease_expires_at <= now()
				  AND ` + notPausedT + `
				FOR UPDATE OF t SKIP LOCKED
			) l
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET version = t.version + CASE WHEN c.release THEN 2 ELSE 1 END,
			    owner = CASE WHEN c.release THEN NULL ELSE $7 END,
			    claimed_at = statement_timestamp(),
			    heartbeat_at = CASE WHEN c.release THEN NULL ELSE statement_timestamp() END,
			    lease_expires_at = CASE WHEN c.release THEN '-infinity'
			                            ELSE statement_timestamp() + $8::bigint * interval '1 microsecond' END,
			    position = c.position, checkpoint = c.checkpoint::jsonb, attempts = 0, last_error = NULL,
			    traceparent = nullif(c.trace, ''), updated_at = now()
			FROM c
			WHERE t.kind = $11 AND t.partition_key = c.partition_key
			RETURNING t.partition_key, c.version, c.from_pos, t.position, t.available, c.release,
			          t.available > t.position AS pending
		), n AS (
			SELECT count(pg_notify($10, $12 || ' ' || (extract(epoch FROM statement_timestamp()) * 1000000)::bigint)) AS sent
			FROM (SELECT 1 FROM u WHERE release AND pending LIMIT 1) p
		), wh AS (
			-- Claims kept past their first batch raise their worker's held
			-- count (FairShareLoad) as Claim does, here at the end of the
			-- transaction, so the worker row is locked only until the
			-- commit; those released in the same statement leave it.
			-- An owner without a worker row (one that never heartbeated)
			-- is registered, as not live, so that its partitions are found
			-- once their leases end (Store.StaleCandidates).
			INSERT INTO {{.Schema}}.workers (instance_id, name, kind, expires_at, held, backlog)
			SELECT $7, split_part($7, '#', 1), $11, now(), count(*), coalesce(sum(greatest(available - position, 0)), 0)
			FROM u WHERE NOT release HAVING count(*) > 0
			ON CONFLICT (instance_id) DO UPDATE
			SET held = workers.held + EXCLUDED.held, backlog = workers.backlog + EXCLUDED.backlog
		)`

// claimAdvanceGroupEventsSQL is claimAdvanceGroupSQL recording each
// member's history in the same statement: claimed, first_batch and, when
// released, released with the member's reason ($13, in $1's order), all
// under the claim's version.
const claimAdvanceGroupEventsSQL = claimAdvanceGroupCTEs + `, e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, position, items, detail)
			SELECT $11, partition_key, '` + string(partition.EventClaimed) + `', version, $7, from_pos, NULL::bigint, NULL FROM u
			UNION ALL
			SELECT $11, partition_key, '` + string(partition.EventFirstBatch) + `', version, $7, position, position - from_pos, NULL FROM u
			UNION ALL
			SELECT $11, u.partition_key, '` + string(partition.EventReleased) + `', u.version, $7, u.position, NULL::bigint, nullif(r.reason, '')
			FROM u JOIN unnest($1::text[], $13::text[]) AS r(key, reason) ON r.key = u.partition_key WHERE u.release
		)
		SELECT count(*) FROM u CROSS JOIN n`

// scanCount reads a statement's single count into n and closes rows.
func scanCount(rows *sql.Rows, n *int) error {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(n); err != nil {
		return err
	}
	return rows.Close()
}
