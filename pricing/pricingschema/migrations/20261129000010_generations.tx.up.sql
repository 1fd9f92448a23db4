-- Re-rating: each contract's priced output belongs to a generation.
--
-- Re-pricing a contract (corrected tiers, an amended record, "worker
-- reprice") starts a new generation: the contract's task row is rewound
-- (partition.Store.Rewind: generation + 1, version + 1, so the old claim is
-- fenced out) to the position from which its output changes, and workers
-- price it again through the same protocol into priced_pending while
-- readers keep seeing priced, the current generation. The batch that
-- catches up with the contract's records switches, in its own commit: the
-- current generation's rows past from_seq move to priced_superseded, the
-- pending rows move into priced, and contracts.current_generation is set.
-- priced therefore always holds exactly the current generation, and every
-- reader of it (export, verify, the console, retention) is unchanged.

-- The generation of a contract whose rows priced holds.
ALTER TABLE {{.Schema}}.contracts ADD COLUMN current_generation bigint NOT NULL DEFAULT 1;

-- One row per generation of a re-priced contract. Generation 1's row is
-- written by the first re-pricing of the contract (state current, from_seq
-- 0, the tiers it was priced with); a contract never re-priced has none.
CREATE TABLE {{.Schema}}.generations (
    contract_id    text COLLATE "C" NOT NULL REFERENCES {{.Schema}}.contracts (contract_id),
    generation     bigint NOT NULL CHECK (generation >= 1),
    state          text NOT NULL CHECK (state IN ('pricing', 'current', 'superseded', 'abandoned')),
    -- Records after from_seq are priced anew; the prefix up to it is
    -- shared with the generation before.
    from_seq       bigint NOT NULL CHECK (from_seq >= 0),
    started_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz,          -- became current, or was abandoned
    superseded_at  timestamptz,
    started_by     text NOT NULL DEFAULT '',
    reason         text NOT NULL DEFAULT '',
    tiers          jsonb NOT NULL,       -- [{"threshold_minor": …, "discount_bp": …}, …]
    -- Frozen when the generation stops being in progress (becomes current
    -- or is abandoned); NULL while it is being priced.
    records        bigint,
    gross_total    bigint,
    discount_total bigint,
    net_total      bigint,
    PRIMARY KEY (contract_id, generation)
);
-- At most one generation of a contract is in progress, and one is current.
CREATE UNIQUE INDEX generations_pricing ON {{.Schema}}.generations (contract_id) WHERE state = 'pricing';
CREATE UNIQUE INDEX generations_current ON {{.Schema}}.generations (contract_id) WHERE state = 'current';

-- Priced rows of a generation being priced (seq > its from_seq).
CREATE TABLE {{.Schema}}.priced_pending (
    contract_id    text COLLATE "C" NOT NULL,
    generation     bigint NOT NULL,
    seq            bigint NOT NULL,
    record_id      text COLLATE "C" NOT NULL,
    gross_minor    bigint NOT NULL,
    discount_minor bigint NOT NULL,
    net_minor      bigint NOT NULL,
    claim_version  bigint NOT NULL,
    priced_by      text NOT NULL,
    priced_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (contract_id, generation, seq)
);

-- Priced rows of a superseded generation that the next generation
-- replaced (seq > the next generation's from_seq); its rows up to that
-- from_seq stay in priced, shared.
CREATE TABLE {{.Schema}}.priced_superseded (
    contract_id    text COLLATE "C" NOT NULL,
    generation     bigint NOT NULL,
    seq            bigint NOT NULL,
    record_id      text COLLATE "C" NOT NULL,
    gross_minor    bigint NOT NULL,
    discount_minor bigint NOT NULL,
    net_minor      bigint NOT NULL,
    claim_version  bigint NOT NULL,
    priced_by      text NOT NULL,
    priced_at      timestamptz NOT NULL,
    PRIMARY KEY (contract_id, generation, seq)
);

-- Amended records: the amount a load replaced, for the audit trail.
CREATE TABLE {{.Schema}}.amendments (
    amendment_id     bigserial PRIMARY KEY,
    contract_id      text COLLATE "C" NOT NULL,
    record_id        text COLLATE "C" NOT NULL,
    seq              bigint NOT NULL,
    old_amount_minor bigint NOT NULL,
    new_amount_minor bigint NOT NULL,
    load_id          bigint NOT NULL,
    generation       bigint NOT NULL, -- the generation that prices the new amount
    reason           text NOT NULL DEFAULT '',
    amended_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX amendments_contract ON {{.Schema}}.amendments (contract_id, seq);

-- Grants, for roles set up by roles.sql before this migration:
--   whoever may write priced output (the worker) prices generations and
--   switches them: pending rows in and out, rows of the current generation
--   moved to priced_superseded, the generation rows and contracts updated,
--   and prunes superseded generations ("worker prune");
--   whoever may write record chunks (the loader) amends and re-prices:
--   amounts updated, amendments and generation rows written, in-flight
--   pending rows removed, priced rows read for the rewound checkpoint,
--   and task rows rewound.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.priced'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON {{.Schema}}.priced_pending TO %s', g.role);
        EXECUTE format('GRANT SELECT, INSERT, DELETE ON {{.Schema}}.priced_superseded TO %s', g.role);
        EXECUTE format('GRANT DELETE ON {{.Schema}}.priced TO %s', g.role);
        EXECUTE format('GRANT SELECT, UPDATE, DELETE ON {{.Schema}}.generations TO %s', g.role);
        EXECUTE format('GRANT SELECT ON {{.Schema}}.amendments TO %s', g.role);
        EXECUTE format('GRANT UPDATE (current_generation) ON {{.Schema}}.contracts TO %s', g.role);
    END LOOP;
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.record_chunks'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT UPDATE (amounts) ON {{.Schema}}.record_chunks TO %s', g.role);
        EXECUTE format('GRANT SELECT, INSERT ON {{.Schema}}.amendments TO %s', g.role);
        EXECUTE format('GRANT USAGE ON SEQUENCE {{.Schema}}.amendments_amendment_id_seq TO %s', g.role);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{.Schema}}.generations TO %s', g.role);
        EXECUTE format('GRANT SELECT, DELETE ON {{.Schema}}.priced_pending TO %s', g.role);
        EXECUTE format('GRANT SELECT ON {{.Schema}}.priced, {{.Schema}}.priced_superseded TO %s', g.role);
        EXECUTE format('GRANT UPDATE (generation, version, owner, lease_expires_at, position, checkpoint, failed_at, attempts, last_error, traceparent, updated_at) ON {{.Schema}}.tasks TO %s', g.role);
        EXECUTE format('GRANT INSERT ON {{.Schema}}.events TO %s', g.role);
    END LOOP;
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.record_chunks'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'SELECT'
    LOOP
        EXECUTE format('GRANT SELECT ON {{.Schema}}.generations, {{.Schema}}.amendments TO %s', g.role);
    END LOOP;
END $$;
