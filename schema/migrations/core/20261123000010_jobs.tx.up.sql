-- Scheduled jobs: one row per job, owned by the same protocol as a task
-- row (compare-and-set on version, leases on the database clock, renewed by
-- heartbeats). See package schedule's documentation.
CREATE TABLE {{.Schema}}.jobs (
    name                 text COLLATE "C" PRIMARY KEY,
    -- The schedule: every_us (a fixed interval, slots aligned to the Unix
    -- epoch) or cron (a five-field cron expression, UTC).
    every_us             bigint CHECK (every_us > 0),
    cron                 text,
    mode                 text NOT NULL DEFAULT 'lock' CHECK (mode IN ('lock', 'expire', 'leader')),
    missed               text NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'catch-up')),
    lock_at_most_for_us  bigint NOT NULL CHECK (lock_at_most_for_us > 0),
    lock_at_least_for_us bigint NOT NULL DEFAULT 0 CHECK (lock_at_least_for_us >= 0),
    -- What runs: an external command (argv) or a built-in job, or neither
    -- for jobs whose function is registered in code.
    command              text[],
    builtin              text,
    -- Ownership, exactly as on tasks: bumped by every claim; fences runs.
    version              bigint NOT NULL DEFAULT 0,
    owner                text,
    heartbeat_at         timestamptz,
    lease_expires_at     timestamptz NOT NULL DEFAULT '-infinity',
    -- idle or running; a running row whose lease expired is taken over and
    -- its slot run again.
    state                text NOT NULL DEFAULT 'idle' CHECK (state IN ('idle', 'running')),
    -- The earliest slot not yet run (database clock).
    next_run             timestamptz NOT NULL,
    -- A manual run requested at this time (database clock), if any.
    trigger_at           timestamptz,
    running_slot         timestamptz,
    running_triggered    boolean NOT NULL DEFAULT false,
    run_deadline         timestamptz,
    last_slot            timestamptz,
    last_run_started     timestamptz,
    last_run_finished    timestamptz,
    last_result          text,
    last_error           text,
    runs                 bigint NOT NULL DEFAULT 0,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT jobs_one_schedule CHECK ((every_us IS NULL) <> (cron IS NULL)),
    CONSTRAINT jobs_running_slot CHECK ((state = 'running') = (running_slot IS NOT NULL))
);

-- Cluster-wide leaderships (leader election): one row per name, owned by the
-- same lease protocol; version is the leader's fencing token.
CREATE TABLE {{.Schema}}.leaderships (
    name             text COLLATE "C" PRIMARY KEY,
    version          bigint NOT NULL DEFAULT 0,
    owner            text,
    elected_at       timestamptz,
    heartbeat_at     timestamptz,
    lease_expires_at timestamptz NOT NULL DEFAULT '-infinity'
);

-- Entity locks by the insert-then-delete technique: a transaction inserts
-- the key and deletes it again; a concurrent insert of the same key waits
-- on the unique index until the first transaction ends. No row survives a
-- commit.
CREATE TABLE {{.Schema}}.entity_locks (
    lock_key text COLLATE "C" PRIMARY KEY
);
