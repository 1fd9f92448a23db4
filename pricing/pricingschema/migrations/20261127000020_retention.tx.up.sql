-- Retention: "worker prune" removes the records and priced output of
-- finished loads, in small transactions, while workers run (pricer/
-- retention.go). Only chunks whose records are all priced (last_seq at or
-- below the contract's checkpoint) are removed, each together with its
-- priced rows.

-- A load's pruning: when it began (a pruning that was interrupted has
-- prune_started_at without pruned_at, and "worker prune" carries on), when
-- it ended (nothing of the load is stored any more), and how many of its
-- records went.
ALTER TABLE {{.Schema}}.loads
    ADD COLUMN prune_started_at timestamptz,
    ADD COLUMN pruned_at        timestamptz,
    ADD COLUMN records_pruned   bigint NOT NULL DEFAULT 0;

-- What pruning removed from each contract, summed: its record count, its
-- highest seq, and the sums of the priced rows removed with them. Checks of
-- the output (verify) add these to what is still stored, so a contract's
-- cumulative totals and its checkpoint still add up after pruning, and its
-- number of records (its highest seq) survives the removal of its last
-- chunk. A contract keeps its task row, its position and its tiers.
CREATE TABLE {{.Schema}}.pruned_totals (
    contract_id    text COLLATE "C" PRIMARY KEY,
    records        bigint NOT NULL DEFAULT 0 CHECK (records >= 0),
    last_seq       bigint NOT NULL DEFAULT 0,
    gross_minor    bigint NOT NULL DEFAULT 0,
    discount_minor bigint NOT NULL DEFAULT 0,
    net_minor      bigint NOT NULL DEFAULT 0
);

-- Pruning finds a load's chunks by load id.
CREATE INDEX record_chunks_load ON {{.Schema}}.record_chunks (load_id, contract_id, first_seq);

-- Whoever may read the chunks may read what was pruned from them.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.record_chunks'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'SELECT'
    LOOP
        EXECUTE format('GRANT SELECT ON {{.Schema}}.pruned_totals TO %s', g.role);
    END LOOP;
END $$;

-- Inserts through the records view: a contract's next seq follows its last
-- stored or pruned one (pruning its last chunk does not restart its seqs).
-- Otherwise as in 20261124000010_records_insert_load_lock.
CREATE OR REPLACE FUNCTION {{.Schema}}.records_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    last_stored bigint;
BEGIN
    IF NEW.contract_id IS NULL OR NEW.seq IS NULL OR NEW.record_id IS NULL OR NEW.amount_minor IS NULL OR NEW.load_id IS NULL THEN
        RAISE EXCEPTION 'records: contract_id, seq, record_id, amount_minor and load_id are required'
            USING ERRCODE = 'not_null_violation';
    END IF;
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'records: inserts need a READ COMMITTED transaction, not %', upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'The checks for a seq or record id the contract has must see the records committed while the insert waited for the load lock.';
    END IF;
    -- The load lock, as ingest takes it (loadLockKey = 0x6261746f6e2d6c64).
    PERFORM pg_advisory_xact_lock(7089075310396533860);
    IF EXISTS (SELECT 1 FROM {{.Schema}}.record_chunks c
                WHERE c.contract_id = NEW.contract_id AND c.first_seq <= NEW.seq AND c.last_seq >= NEW.seq) THEN
        RAISE EXCEPTION 'records: contract % already has a record with seq %', NEW.contract_id, NEW.seq
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'records_pkey';
    END IF;
    SELECT c.last_seq INTO last_stored FROM {{.Schema}}.record_chunks c
     WHERE c.contract_id = NEW.contract_id ORDER BY c.first_seq DESC LIMIT 1;
    last_stored := greatest(coalesce(last_stored, 0),
                            coalesce((SELECT p.last_seq FROM {{.Schema}}.pruned_totals p WHERE p.contract_id = NEW.contract_id), 0));
    IF NEW.seq BETWEEN 1 AND last_stored THEN
        RAISE EXCEPTION 'records: contract % already had a record with seq % (pruned)', NEW.contract_id, NEW.seq
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'records_pkey';
    END IF;
    IF NEW.seq > last_stored + 1 THEN
        RAISE EXCEPTION 'records: the next seq of contract % is %, not %', NEW.contract_id, last_stored + 1, NEW.seq
            USING ERRCODE = 'check_violation',
                  HINT = 'A contract''s seqs are dense: a load numbers its records from available + 1 and would store its own over a record further on.';
    END IF;
    IF EXISTS (SELECT 1 FROM {{.Schema}}.record_chunks c
                WHERE c.contract_id = NEW.contract_id AND NEW.record_id = ANY (c.record_ids)) THEN
        RAISE EXCEPTION 'records: contract % already has record id %', NEW.contract_id, NEW.record_id
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'records_contract_record_id';
    END IF;
    -- The chunk's CHECK constraints cover seq >= 1 and the amount's range.
    INSERT INTO {{.Schema}}.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
    VALUES (NEW.contract_id, NEW.seq, NEW.seq, NEW.load_id, ARRAY[NEW.record_id], ARRAY[NEW.amount_minor]);
    RETURN NEW;
END $$;
