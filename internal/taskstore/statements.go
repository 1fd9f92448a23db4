package taskstore

import "github.com/batonhq/baton/partition"

// The coordination statements every worker runs at every heartbeat and
// poll, with their values as parameters ($1, $2, ...) so that their text
// never changes and a direct connection prepares each once (PrepareWhen).

// Partitions are claimable in two ways, found through two indexes, so
// that no index covers a column that a heartbeat or a checkpoint changes
// (those updates stay heap-only; see the migration tasks_hot):
//
//   - unowned rows with pending work, not quarantined, whose
//     claimable_at (their lease_expires_at: the time they became
//     claimable, or the end of a back-off) has come: the head of the
//     kind's range of the tasks_claimable index, read from the store's
//     floor (see claimFloor) so that the entries of rows claimed since,
//     which a long-held snapshot keeps from being removed, are not walked;
//   - stale rows: owned by a worker that is not live (its registration
//     expired, it stopped, or it never registered), with pending work,
//     not quarantined, whose own lease has ended: the rows of each such
//     worker, through the tasks_owner index. A live worker's row whose
//     lease ended is handed back by that worker's next heartbeat
//     (heartbeatSQL), so it is claimable as an unowned row then.
//
// staleRows is the second: kind $K's stale rows, with their leases' ends
// as "at" and their pending items as "backlog", up to limit of them per worker (earliest expired first). The
// workers table holds one row per instance (the fair share reads it whole
// too); only the instances that are not live are looked up in tasks, each
// through the tasks_owner index (the lateral subquery with its limit is
// run once per such instance, never merged into a join that could read
// tasks whole).
func staleRows(k, limit string) string {
	return `
			SELECT t.partition_key, t.version, t.lease_expires_at AS at, t.available - t.position AS backlog
			FROM {{.Schema}}.workers w
			CROSS JOIN LATERAL (
				SELECT t.partition_key, t.version, t.lease_expires_at, t.available, t.position
				FROM {{.Schema}}.tasks t
				WHERE t.owner = w.instance_id AND t.kind = ` + k + `
				  AND t.available > t.position AND t.failed_at IS NULL AND t.lease_expires_at <= now()
				  AND ` + partitionNotPausedT + `
				ORDER BY t.lease_expires_at
				LIMIT ` + limit + `
			) t
			WHERE NOT (w.expires_at > now() AND w.stopped_at IS NULL) AND ` + kindNotPaused(k)
}

// candidatesSQL reads up to $1 claimable rows of kind $2, earliest
// claimable first: the head of the kind's range of the tasks_claimable
// index from floor $3, and the stale rows; with each, when it became
// claimable (or its lease ended) and the statement's time, in seconds
// since the Unix epoch (-Infinity for a row made claimable by hand with
// lease_expires_at '-infinity'), and its pending items.
var candidatesSQL = `
		SELECT partition_key, version, owned, extract(epoch FROM at)::float8, extract(epoch FROM now())::float8, backlog FROM (
			(SELECT partition_key, version, false AS owned, claimable_at AS at, greatest(available - position, 0) AS backlog
			 FROM {{.Schema}}.tasks t
			 WHERE kind = $2 AND claimable_at >= $3::timestamptz AND claimable_at <= now()
			   AND ` + partitionNotPausedT + ` AND ` + kindNotPaused("$2") + `
			 ORDER BY claimable_at
			 LIMIT $1)
			UNION ALL
			(SELECT partition_key, version, true, at, backlog FROM (` + staleRows("$2", "$1") + `) s
			 ORDER BY at
			 LIMIT $1)
		) c
		ORDER BY at
		LIMIT $1`

// staleCandidatesSQL reads up to $1 stale rows of kind $2, earliest
// expired first.
var staleCandidatesSQL = `
		SELECT partition_key, version, true FROM (` + staleRows("$2", "$1") + `) s
		ORDER BY at
		LIMIT $1`

// heartbeatSQL renews worker $3 of kind $12 and those of its leases (keys
// $1, versions $2) with less than $10 microseconds left for $9
// microseconds; $4–$8 are the worker's name, hostname, pid, mode and
// wake, $11 how many more partitions it wants. It also hands back the
// worker's rows that it does not list and whose leases have ended (a
// lease its owner stopped renewing, or a claim it never learnt of),
// notifying channel $13 with payload $14, followed by the statement's
// time (the rows became claimable no earlier: PayloadSince), when they
// have pending work. Each lease comes back with whether its partition is
// paused (pausedT), for its owner to release it. A
// worker's first heartbeat, which registers it, notifies channel $13 with
// payload $15.
//
// It is written for servers before PostgreSQL 18; heartbeatSQL18 is the
// same statement for 18 and later (see joinedByXmax).
var heartbeatSQL = heartbeatCTEs(joinedByXmax) + heartbeatResult

// heartbeatEventsSQL is heartbeatSQL recording each hand-back in the
// partition's history: released, reason "expired", under the claim's
// version.
var heartbeatEventsSQL = heartbeatCTEs(joinedByXmax) + heartbeatEvents + heartbeatResult

// heartbeatSQL18 and heartbeatEventsSQL18 are heartbeatSQL and
// heartbeatEventsSQL for PostgreSQL 18 and later.
var (
	heartbeatSQL18       = heartbeatCTEs(joinedByOld) + heartbeatResult
	heartbeatEventsSQL18 = heartbeatCTEs(joinedByOld) + heartbeatEvents + heartbeatResult
)

// How the worker's upsert tells its first heartbeat (an insert) from the
// others (an update of its row), to notify the others of a new worker.
// Before PostgreSQL 18 only the row's system column xmax tells: 0 on a
// row just inserted, the updating transaction's id on a row that ON
// CONFLICT DO UPDATE rewrote. From 18 on, RETURNING names the row as it
// was before the statement (old), which has no values after an insert;
// instance_id is the row's key, never null in a row that existed.
const (
	joinedByXmax = `CASE WHEN workers.xmax = 0 THEN pg_notify($13, $15) END`
	joinedByOld  = `CASE WHEN old.instance_id IS NULL THEN pg_notify($13, $15) END`
)

const heartbeatEvents = `, e AS (
			INSERT INTO {{.Schema}}.events (task_kind, partition_key, kind, version, worker, position, detail)
			SELECT $12, partition_key, '` + string(partition.EventReleased) + `', version - 1, $3, position, 'expired' FROM x
		)`

// heartbeatCTEs is the heartbeat's common table expressions, with joined
// the expression of the worker's upsert that notifies a first heartbeat.
func heartbeatCTEs(joined string) string {
	return `
		WITH o AS MATERIALIZED (
			-- Every row of this worker as of this statement's snapshot,
			-- read once through the owner index: counted for held, and
			-- the unlisted ones past their leases handed back.
			SELECT partition_key, version, lease_expires_at, greatest(available - position, 0) AS backlog
			FROM {{.Schema}}.tasks
			WHERE owner = $3 AND kind = $12
		), h AS (
			-- Still ours as of this statement's snapshot. (Whether each
			-- is paused is read at the end: the registration below stays
			-- within the text pg_stat_activity shows, 1,024 bytes.)
			SELECT t.kind, t.partition_key, t.segment_of, t.version, t.available, t.position, t.lease_expires_at
			FROM {{.Schema}}.tasks t
			JOIN unnest($1::text[], $2::bigint[]) AS h(key, version)
			  ON t.kind = $12 AND t.partition_key = h.key AND t.version = h.version
			WHERE coalesce(t.owner, '') = $3 -- by key, not through tasks_owner (ownedBy)
		), w AS (
			INSERT INTO {{.Schema}}.workers (instance_id, name, hostname, pid, mode, wake, expires_at, wanted, held, backlog, kind)
			VALUES ($3, $4, $5, $6, $7, $8, now() + $9::bigint * interval '1 microsecond', $11::integer,
			        -- Every lease of this worker, not only those it sent: a
			        -- claim that committed after the worker listed its
			        -- leases is counted too, with its pending items.
			        (SELECT count(*) FROM o WHERE lease_expires_at > now()),
			        (SELECT coalesce(sum(backlog), 0) FROM o WHERE lease_expires_at > now()),
			        $12)
			ON CONFLICT (instance_id) DO UPDATE
			SET heartbeat_at = now(), expires_at = EXCLUDED.expires_at, wanted = EXCLUDED.wanted,
			    kind = EXCLUDED.kind,
			    -- A claim that committed after this statement's snapshot
			    -- raised held and backlog itself (the row changed since):
			    -- keep those until the next heartbeat rather than lose the
			    -- claim.
			    held = CASE WHEN workers.xmin = (SELECT xmin FROM {{.Schema}}.workers WHERE instance_id = $3)
			                THEN EXCLUDED.held ELSE workers.held END,
			    backlog = CASE WHEN workers.xmin = (SELECT xmin FROM {{.Schema}}.workers WHERE instance_id = $3)
			                   THEN EXCLUDED.backlog ELSE workers.backlog END
			-- A late heartbeat (cancelled client-side, applied server-side
			-- after the worker stopped) must not bring it back to life.
			WHERE workers.stopped_at IS NULL
			-- A worker's first heartbeat (an insert) tells the others at
			-- its commit, so that they recompute their shares.
			RETURNING ` + joined + ` AS joined
		), l AS (
			SELECT t.partition_key
			FROM {{.Schema}}.tasks t
			JOIN unnest($1::text[], $2::bigint[]) AS h(key, version)
			  ON t.kind = $12 AND t.partition_key = h.key AND t.version = h.version
			WHERE coalesce(t.owner, '') = $3 -- by key, not through tasks_owner (ownedBy)
			  -- Only leases with less than $10 microseconds left.
			  AND t.lease_expires_at < now() + $10::bigint * interval '1 microsecond'
			ORDER BY t.partition_key
			FOR NO KEY UPDATE OF t SKIP LOCKED
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET heartbeat_at = now(), lease_expires_at = now() + $9::bigint * interval '1 microsecond'
			FROM l
			WHERE t.kind = $12 AND t.partition_key = l.partition_key
			RETURNING t.partition_key, t.version, t.available, t.position, ` + pausedT + ` AS paused
		), xl AS (
			-- Rows of this worker that it does not list (it stopped
			-- processing them, or never learnt of their claim) and whose
			-- leases have ended: a change of ownership (FOR UPDATE, version
			-- bumped), as another worker's takeover would have been. Those
			-- rows are found by others only once this worker is not live.
			SELECT t.partition_key
			FROM o
			JOIN {{.Schema}}.tasks t ON t.kind = $12 AND t.partition_key = o.partition_key
			WHERE o.lease_expires_at <= now()
			  AND (o.partition_key, o.version) NOT IN (SELECT * FROM unnest($1::text[], $2::bigint[]))
			  AND coalesce(t.owner, '') = $3 AND t.version = o.version AND t.lease_expires_at <= now()
			ORDER BY t.partition_key
			FOR UPDATE OF t SKIP LOCKED
		), x AS (
			UPDATE {{.Schema}}.tasks t
			SET version = t.version + 1, owner = NULL, heartbeat_at = NULL,
			    lease_expires_at = '-infinity', updated_at = now()
			FROM xl
			WHERE t.kind = $12 AND t.partition_key = xl.partition_key
			RETURNING t.partition_key, t.version, t.position,
			          -- Waiting workers are woken at the commit (one
			          -- notification however many rows).
			          CASE WHEN t.available > t.position THEN pg_notify($13, $14 || ' ' || (extract(epoch FROM statement_timestamp()) * 1000000)::bigint) END AS notified
		)`
}

const heartbeatResult = `
		SELECT partition_key, version, available, position, false, false, 0::bigint, paused FROM u
		UNION ALL
		-- Not renewed, still ours as of this statement's snapshot: with
		-- enough lease left (fresh), or skipped because locked.
		SELECT partition_key, version, available, position,
		       lease_expires_at >= now() + $10::bigint * interval '1 microsecond',
		       lease_expires_at < now() + $10::bigint * interval '1 microsecond',
		       greatest(0, (extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint),
		       ` + pausedT + `
		FROM h t WHERE partition_key NOT IN (SELECT partition_key FROM u)`

// fairShareSQL reads the fair-share inputs for worker $3 of kind $4 with
// room for $1 partitions whose leases last $2 microseconds: the kind's
// workers and partitions only, the claimable rows from floor $5. It also
// returns, as candidatesSQL does, when the earliest unowned claimable row
// it counted became claimable (NULL for none), the statement's time, and
// whether it counted all the unowned ones from the floor.
var fairShareSQL = `
		WITH w AS (
		  SELECT instance_id, held, wanted, backlog, expires_at > now() AND stopped_at IS NULL AS live,
		         -- Stopped within the last stale-after ($2 microseconds):
		         -- not live any more, its leases maybe not released yet.
		         stopped_at > now() - $2::bigint * interval '1 microsecond' AS leaving
		  FROM {{.Schema}}.workers
		  WHERE kind = $4
		), live AS (
		  -- One pass over the workers' rows.
		  SELECT count(*) FILTER (WHERE live) AS n,
		         coalesce(sum(held) FILTER (WHERE live), 0) AS held,
		         coalesce(min(held) FILTER (WHERE live), 0) AS min_held,
		         coalesce(sum(wanted) FILTER (WHERE live AND instance_id <> $3), 0) AS wanted,
		         coalesce(sum(backlog) FILTER (WHERE live), 0) AS backlog,
		         coalesce(max(backlog) FILTER (WHERE live AND instance_id = $3), 0) AS self_backlog,
		         array_agg(instance_id) FILTER (WHERE leaving) AS leaving
		  FROM w WHERE live OR leaving
		), leaving AS (
		  SELECT count(*) AS n, coalesce(sum(greatest(available - position, 0)), 0) AS backlog
		  FROM {{.Schema}}.tasks
		  WHERE owner = ANY ((SELECT leaving FROM live)::text[]) AND kind = $4 AND lease_expires_at > now()
		), cap AS (
		  SELECT greatest(greatest(n, 1) * $1::bigint - held, $1::bigint + 1) AS n FROM live
		), claimable AS (
		  -- Unowned and stale, each counted up to the cap, with their
		  -- pending items; the earliest unowned one, and how many, move
		  -- the floor as a read of the candidates does.
		  SELECT count(*) AS n, coalesce(sum(backlog), 0) AS backlog,
		         min(at) FILTER (WHERE NOT owned) AS earliest,
		         count(*) FILTER (WHERE NOT owned) AS unowned FROM (
		    (SELECT greatest(available - position, 0) AS backlog, claimable_at AS at, false AS owned FROM {{.Schema}}.tasks t
		     WHERE kind = $4 AND claimable_at >= $5::timestamptz AND claimable_at <= now()
		       AND ` + partitionNotPausedT + ` AND ` + kindNotPaused("$4") + `
		     ORDER BY claimable_at
		     LIMIT (SELECT n FROM cap))
		    UNION ALL
		    (SELECT backlog, at, true FROM (` + staleRows("$4", "(SELECT n FROM cap)") + `) s
		     LIMIT (SELECT n FROM cap))) c
		)
		SELECT
		  CASE WHEN live.held + leaving.n + claimable.n > 0
		       THEN least(greatest(live.n, 1) * $1::bigint, live.held + leaving.n + claimable.n)
		       -- Pending work all the same: unowned, waiting out a
		       -- back-off, or owned under a lease that has not ended (a
		       -- dead worker's, or one no heartbeat has counted yet).
		       ELSE coalesce((SELECT 1 FROM {{.Schema}}.tasks WHERE kind = $4 AND claimable_at >= $5::timestamptz
		                      ORDER BY claimable_at LIMIT 1),
		                     (SELECT 1 FROM {{.Schema}}.workers w
		                      CROSS JOIN LATERAL (SELECT 1 FROM {{.Schema}}.tasks t
		                        WHERE t.owner = w.instance_id AND t.kind = $4 AND t.available > t.position
		                          AND t.failed_at IS NULL LIMIT 1) t
		                      LIMIT 1), 0) END,
		  live.n,
		  least(claimable.n, $1::bigint + 1),
		  live.min_held,
		  live.wanted,
		  live.backlog + leaving.backlog + claimable.backlog,
		  live.self_backlog,
		  extract(epoch FROM claimable.earliest)::float8,
		  extract(epoch FROM now())::float8,
		  claimable.unowned < (SELECT n FROM cap)
		FROM live, leaving, claimable`
