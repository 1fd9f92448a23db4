-- Tables of the pricing application, in baton's schema beside the core set.

-- Contracts and their discount tiers (pricing inputs).
CREATE TABLE {{.Schema}}.contracts (
    contract_id text COLLATE "C" PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT contracts_id_format CHECK (contract_id ~ '^[A-Za-z0-9._:-]{1,64}$')
);

CREATE TABLE {{.Schema}}.tiers (
    contract_id     text COLLATE "C" NOT NULL REFERENCES {{.Schema}}.contracts (contract_id),
    threshold_minor bigint NOT NULL CHECK (threshold_minor >= 0),
    discount_bp     integer NOT NULL CHECK (discount_bp BETWEEN 0 AND 10000),
    PRIMARY KEY (contract_id, threshold_minor)
);

-- One row per load command, for auditing and for tracing records back to it.
CREATE TABLE {{.Schema}}.loads (
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
CREATE TABLE {{.Schema}}.records (
    contract_id  text COLLATE "C" NOT NULL,
    seq          bigint NOT NULL CHECK (seq >= 1),
    record_id    text COLLATE "C" NOT NULL,
    amount_minor bigint NOT NULL CHECK (amount_minor BETWEEN 1 AND 1000000000000),
    load_id      bigint NOT NULL,
    PRIMARY KEY (contract_id, seq)
);
CREATE UNIQUE INDEX records_contract_record_id ON {{.Schema}}.records (contract_id, record_id);

-- Priced output, one row per priced record. The primary key makes a second
-- pricing of the same record impossible even if every other guard failed.
CREATE TABLE {{.Schema}}.priced (
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

