-- Pruned record ids: "worker prune" keeps, for each chunk it removes, the
-- chunk's record ids and amounts, so that a record delivered again after
-- its load was pruned is still known to the loader: skipped as a
-- re-delivery with the same amount, refused with another (pricing/ingest).
-- Only the priced rows and the chunk's place among the stored records go;
-- the ids are kept exactly, not as a filter that could mistake a new id
-- for an old one or miss one.
--
-- A pruned chunk is the record chunk as it was (its seqs, its load, its
-- ids and amounts in seq order), compressed: unlike record_chunks, written
-- once by a load's COPY at full speed, pruned_chunks is written by pruning,
-- a few chunks a transaction, and read only by loads that name the
-- contract. lz4 where the server has it (it compresses 1,024 ids and
-- amounts in about 0.15 ms), pglz otherwise.
CREATE TABLE {{.Schema}}.pruned_chunks (
    contract_id text COLLATE "C" NOT NULL,
    first_seq   bigint NOT NULL,
    last_seq    bigint NOT NULL,
    load_id     bigint NOT NULL,
    record_ids  text[] COLLATE "C" NOT NULL,
    amounts     bigint[] NOT NULL,
    PRIMARY KEY (contract_id, first_seq),
    CONSTRAINT pruned_chunks_seqs CHECK (first_seq >= 1 AND last_seq >= first_seq AND last_seq - first_seq < 1024),
    CONSTRAINT pruned_chunks_lengths CHECK (
        array_ndims(record_ids) = 1 AND array_lower(record_ids, 1) = 1 AND cardinality(record_ids) = last_seq - first_seq + 1 AND
        array_ndims(amounts) = 1 AND array_lower(amounts, 1) = 1 AND cardinality(amounts) = last_seq - first_seq + 1)
);

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE {{.Schema}}.pruned_chunks ALTER COLUMN record_ids SET COMPRESSION lz4,
                                             ALTER COLUMN amounts SET COMPRESSION lz4;
    ELSE
        ALTER TABLE {{.Schema}}.pruned_chunks ALTER COLUMN record_ids SET COMPRESSION pglz,
                                             ALTER COLUMN amounts SET COMPRESSION pglz;
    END IF;
END $$;

-- One row per pruned record, as the records view is for stored ones.
CREATE VIEW {{.Schema}}.pruned_records AS
SELECT c.contract_id, c.first_seq + u.i - 1 AS seq, u.record_id, u.amount_minor, c.load_id
  FROM {{.Schema}}.pruned_chunks c
 CROSS JOIN LATERAL unnest(c.record_ids, c.amounts) WITH ORDINALITY AS u (record_id, amount_minor, i);

-- Whoever may read the chunks may read what was pruned from them.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.record_chunks'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'SELECT'
    LOOP
        EXECUTE format('GRANT SELECT ON {{.Schema}}.pruned_chunks, {{.Schema}}.pruned_records TO %s', g.role);
    END LOOP;
END $$;

-- Inserts through the records view refuse a record id the contract had and
-- pruned, as they refuse one it has. Otherwise as in 20261127000020_retention.
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
    IF EXISTS (SELECT 1 FROM {{.Schema}}.pruned_chunks c
                WHERE c.contract_id = NEW.contract_id AND NEW.record_id = ANY (c.record_ids)) THEN
        RAISE EXCEPTION 'records: contract % already had record id % (pruned)', NEW.contract_id, NEW.record_id
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'records_contract_record_id';
    END IF;
    -- The chunk's CHECK constraints cover seq >= 1 and the amount's range.
    INSERT INTO {{.Schema}}.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
    VALUES (NEW.contract_id, NEW.seq, NEW.seq, NEW.load_id, ARRAY[NEW.record_id], ARRAY[NEW.amount_minor]);
    RETURN NEW;
END $$;
