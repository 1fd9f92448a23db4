-- records, a view since the chunked layout, takes inserts again as the table
-- did: each row inserted becomes a chunk of one record. The loader writes
-- chunks itself; this is for SQL that inserted into records directly.
--
-- The former table's constraints are checked as they were: a seq or a
-- record id a contract already has is a unique violation (23505), and the
-- column checks hold. Inserts into one contract take a transaction-scoped
-- advisory lock on it, so that two sessions cannot both add the same seq
-- or id, which the table's unique indexes used to prevent.
CREATE FUNCTION {{.Schema}}.records_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.contract_id IS NULL OR NEW.seq IS NULL OR NEW.record_id IS NULL OR NEW.amount_minor IS NULL OR NEW.load_id IS NULL THEN
        RAISE EXCEPTION 'records: contract_id, seq, record_id, amount_minor and load_id are required'
            USING ERRCODE = 'not_null_violation';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('baton.records'), hashtext(NEW.contract_id));
    IF EXISTS (SELECT 1 FROM {{.Schema}}.record_chunks c
                WHERE c.contract_id = NEW.contract_id AND c.first_seq <= NEW.seq AND c.last_seq >= NEW.seq) THEN
        RAISE EXCEPTION 'records: contract % already has a record with seq %', NEW.contract_id, NEW.seq
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'records_pkey';
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

CREATE TRIGGER records_insert INSTEAD OF INSERT ON {{.Schema}}.records
    FOR EACH ROW EXECUTE FUNCTION {{.Schema}}.records_insert();

-- Whoever may insert chunks may insert through the view.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.record_chunks'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT INSERT ON {{.Schema}}.records TO %s', g.role);
    END LOOP;
END $$;
