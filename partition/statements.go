package partition

// The coordination statements every worker runs at every heartbeat and
// poll, with their values as parameters ($1, $2, ...) so that their text
// never changes and a direct connection prepares each once (PrepareWhen).

// candidatesSQL reads the head of kind $2's range of the tasks_claimable
// index: $1 rows at most.
const candidatesSQL = `
		SELECT partition_key, version, owner IS NOT NULL
		FROM {{.Schema}}.tasks
		WHERE kind = $2 AND available > position AND failed_at IS NULL AND lease_expires_at <= now()
		ORDER BY lease_expires_at
		LIMIT $1`

// staleCandidatesSQL reads kind $2's range of the claimable index from
// just past the unowned rows: $1 rows at most.
const staleCandidatesSQL = `
		SELECT partition_key, version, true
		FROM {{.Schema}}.tasks
		WHERE kind = $2 AND available > position AND failed_at IS NULL
		  AND lease_expires_at > '-infinity' AND lease_expires_at <= now() AND owner IS NOT NULL
		ORDER BY lease_expires_at
		LIMIT $1`

// heartbeatSQL renews worker $3 of kind $12 and those of its leases (keys
// $1, versions $2) with less than $10 microseconds left for $9
// microseconds; $4–$8 are the worker's name, hostname, pid, mode and
// wake, $11 how many more partitions it wants.
const heartbeatSQL = `
		WITH h AS (
			-- Still ours as of this statement's snapshot.
			SELECT t.partition_key, t.version, t.available, t.position, t.lease_expires_at
			FROM {{.Schema}}.tasks t
			JOIN unnest($1::text[], $2::bigint[]) AS h(key, version)
			  ON t.kind = $12 AND t.partition_key = h.key AND t.version = h.version
			WHERE t.owner = $3
		), w AS (
			INSERT INTO {{.Schema}}.workers (instance_id, name, hostname, pid, mode, wake, expires_at, wanted, held, kind)
			VALUES ($3, $4, $5, $6, $7, $8, now() + $9::bigint * interval '1 microsecond', $11::integer,
			        -- Every lease of this worker, not only those it sent: a
			        -- claim that committed after the worker listed its
			        -- leases is counted too.
			        (SELECT count(*) FROM {{.Schema}}.tasks WHERE owner = $3 AND kind = $12 AND lease_expires_at > now()),
			        $12)
			ON CONFLICT (instance_id) DO UPDATE
			SET heartbeat_at = now(), expires_at = EXCLUDED.expires_at, wanted = EXCLUDED.wanted,
			    kind = EXCLUDED.kind,
			    -- A claim that committed after this statement's snapshot
			    -- raised held itself (the row changed since): keep that
			    -- count until the next heartbeat rather than lose the claim.
			    held = CASE WHEN workers.xmin = (SELECT xmin FROM {{.Schema}}.workers WHERE instance_id = $3)
			                THEN EXCLUDED.held ELSE workers.held END
			-- A late heartbeat (cancelled client-side, applied server-side
			-- after the worker stopped) must not bring it back to life.
			WHERE workers.stopped_at IS NULL
		), l AS (
			SELECT t.partition_key
			FROM {{.Schema}}.tasks t
			JOIN unnest($1::text[], $2::bigint[]) AS h(key, version)
			  ON t.kind = $12 AND t.partition_key = h.key AND t.version = h.version
			WHERE t.owner = $3
			  -- Only leases with less than $10 microseconds left.
			  AND t.lease_expires_at < now() + $10::bigint * interval '1 microsecond'
			ORDER BY t.partition_key
			FOR NO KEY UPDATE OF t SKIP LOCKED
		), u AS (
			UPDATE {{.Schema}}.tasks t
			SET heartbeat_at = now(), lease_expires_at = now() + $9::bigint * interval '1 microsecond'
			FROM l
			WHERE t.kind = $12 AND t.partition_key = l.partition_key
			RETURNING t.partition_key, t.version, t.available, t.position
		)
		SELECT partition_key, version, available, position, false, false, 0::bigint FROM u
		UNION ALL
		-- Not renewed, still ours as of this statement's snapshot: with
		-- enough lease left (fresh), or skipped because locked.
		SELECT partition_key, version, available, position,
		       lease_expires_at >= now() + $10::bigint * interval '1 microsecond',
		       lease_expires_at < now() + $10::bigint * interval '1 microsecond',
		       greatest(0, (extract(epoch FROM lease_expires_at - now()) * 1000000)::bigint)
		FROM h WHERE partition_key NOT IN (SELECT partition_key FROM u)`

// fairShareSQL reads the fair-share inputs for worker $3 of kind $4 with
// room for $1 partitions whose leases last $2 microseconds: the kind's
// workers and partitions only.
const fairShareSQL = `
		WITH w AS (
		  SELECT instance_id, held, wanted, expires_at > now() AND stopped_at IS NULL AS live,
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
		         array_agg(instance_id) FILTER (WHERE leaving) AS leaving
		  FROM w WHERE live OR leaving
		), leaving AS (
		  SELECT count(*) AS n FROM {{.Schema}}.tasks
		  WHERE owner = ANY ((SELECT leaving FROM live)::text[]) AND kind = $4 AND lease_expires_at > now()
		), claimable AS (
		  SELECT count(*) AS n FROM (SELECT 1 FROM {{.Schema}}.tasks
		    WHERE kind = $4 AND available > position AND failed_at IS NULL AND lease_expires_at <= now()
		    ORDER BY lease_expires_at
		    LIMIT (SELECT greatest(greatest(n, 1) * $1::bigint - held, $1::bigint + 1) FROM live)) c
		)
		SELECT
		  CASE WHEN live.held + leaving.n + claimable.n > 0
		       THEN least(greatest(live.n, 1) * $1::bigint, live.held + leaving.n + claimable.n)
		       -- Pending work, all of it waiting out a back-off.
		       ELSE coalesce((SELECT 1 FROM {{.Schema}}.tasks WHERE kind = $4 AND available > position AND failed_at IS NULL
		                      ORDER BY lease_expires_at LIMIT 1), 0) END,
		  live.n,
		  least(claimable.n, $1::bigint + 1),
		  live.min_held,
		  live.wanted
		FROM live, leaving, claimable`
