-- Core tables of the distributor, in baton's own schema ({{.Schema}} is
-- replaced by its quoted name; see package schema).

-- The distributor's task rows: one per partition (here, per contract).
-- See package distributor's documentation for the protocol.
CREATE TABLE {{.Schema}}.tasks (
    partition_key    text COLLATE "C" PRIMARY KEY,
    -- Bumped by every change of ownership (claim, release, quarantine, retry).
    -- Claims compare-and-set on it; batch commits are fenced by it.
    version          bigint NOT NULL DEFAULT 0,
    -- Worker instance holding the partition (name#suffix), NULL when unowned.
    owner            text,
    claimed_at       timestamptz,
    -- Last successful heartbeat of the owner, by the database clock.
    heartbeat_at     timestamptz,
    -- The row may be claimed once lease_expires_at <= now(): -infinity when
    -- unowned, heartbeat_at + the owner's stale_after while owned, the end of
    -- the back-off after a failure, +infinity once quarantined.
    lease_expires_at timestamptz NOT NULL DEFAULT '-infinity',
    -- Work items made available by producers (high-water mark) and processed
    -- (the checkpoint position). Pending work is available - position.
    available        bigint NOT NULL DEFAULT 0 CHECK (available >= 0),
    position         bigint NOT NULL DEFAULT 0 CHECK (position >= 0),
    -- Processor-defined checkpoint state committed with position.
    checkpoint       jsonb NOT NULL DEFAULT '{}',
    attempts         integer NOT NULL DEFAULT 0,
    last_error       text,
    failed_at        timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tasks_position_le_available CHECK (position <= available)
);

-- Claim candidates: rows with pending work that are not quarantined, ordered
-- by when they become claimable. A poll reads only the head of this index, so
-- its cost follows the claims made, not the number of partitions.
CREATE INDEX tasks_claimable ON {{.Schema}}.tasks (lease_expires_at)
    WHERE available > position AND failed_at IS NULL;
CREATE INDEX tasks_owner ON {{.Schema}}.tasks (owner) WHERE owner IS NOT NULL;

-- Live worker instances, renewed by the same statement as their partitions.
CREATE TABLE {{.Schema}}.workers (
    instance_id  text PRIMARY KEY,
    name         text NOT NULL,
    hostname     text NOT NULL DEFAULT '',
    pid          integer NOT NULL DEFAULT 0,
    mode         text NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    stopped_at   timestamptz
);
CREATE INDEX workers_expires_at ON {{.Schema}}.workers (expires_at);
