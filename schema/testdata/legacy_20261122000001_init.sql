-- Contracts and their discount tiers (pricing inputs).
CREATE TABLE contracts (
    contract_id text COLLATE "C" PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT contracts_id_format CHECK (contract_id ~ '^[A-Za-z0-9._:-]{1,64}$')
);

CREATE TABLE tiers (
    contract_id     text COLLATE "C" NOT NULL REFERENCES contracts (contract_id),
    threshold_minor bigint NOT NULL CHECK (threshold_minor >= 0),
    discount_bp     integer NOT NULL CHECK (discount_bp BETWEEN 0 AND 10000),
    PRIMARY KEY (contract_id, threshold_minor)
);

-- One row per load command, for auditing and for tracing records back to it.
CREATE TABLE loads (
    load_id             bigserial PRIMARY KEY,
    started_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    tiers_file          text,
    records_file        text,
    tier_rows           bigint NOT NULL DEFAULT 0,
    records_accepted    bigint NOT NULL DEFAULT 0,
    records_redelivered bigint NOT NULL DEFAULT 0,
    rows_rejected       bigint NOT NULL DEFAULT 0
);

-- Consumption records. seq is the 1-based acceptance position within the
-- contract; it is dense and never reused, so a checkpoint is just a seq.
-- No foreign key to contracts: the loader validates contract ids in bulk and a
-- per-row trigger would dominate COPY time.
CREATE TABLE records (
    contract_id  text COLLATE "C" NOT NULL,
    seq          bigint NOT NULL CHECK (seq >= 1),
    record_id    text COLLATE "C" NOT NULL,
    amount_minor bigint NOT NULL CHECK (amount_minor BETWEEN 1 AND 1000000000000),
    load_id      bigint NOT NULL,
    PRIMARY KEY (contract_id, seq)
);
CREATE UNIQUE INDEX records_contract_record_id ON records (contract_id, record_id);

-- Priced output, one row per priced record. The primary key makes a second
-- pricing of the same record impossible even if every other guard failed.
CREATE TABLE priced (
    contract_id    text COLLATE "C" NOT NULL,
    seq            bigint NOT NULL,
    record_id      text COLLATE "C" NOT NULL,
    gross_minor    bigint NOT NULL,
    discount_minor bigint NOT NULL,
    net_minor      bigint NOT NULL,
    claim_version  bigint NOT NULL,
    priced_by      text NOT NULL,
    priced_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (contract_id, seq)
);

-- The distributor's task rows: one per partition (here, per contract).
-- See package distributor's documentation for the protocol.
CREATE TABLE tasks (
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
CREATE INDEX tasks_claimable ON tasks (lease_expires_at)
    WHERE available > position AND failed_at IS NULL;
CREATE INDEX tasks_owner ON tasks (owner) WHERE owner IS NOT NULL;

-- Live worker instances, renewed by the same statement as their partitions.
CREATE TABLE workers (
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
CREATE INDEX workers_expires_at ON workers (expires_at);
