-- Inserts through the records view take the load lock, so that they and
-- loads are serialised and the view's checks hold against loads too.
--
-- The view's checks read the chunks and then insert one: a seq or record id
-- the contract already has is a unique violation only if every record
-- stored before is visible when they run. The per-contract advisory lock
-- the trigger took did that for view inserts among themselves, but a load
-- never took it: a load stores its chunks and commits under its own lock,
-- the load lock (pg_advisory_xact_lock on the single bigint key
-- 0x6261746f6e2d6c64, "baton-ld", ingest's loadLockKey), held from its
-- first statement to its commit. A view insert during a load read the
-- chunks without the load's, and one before a load was invisible to it, so
-- either could store a record id or a seq the other stored too. The trigger
-- now takes the load lock instead, before it reads anything.
--
-- Lock order. A load takes the load lock first, then writes (contracts,
-- tiers, chunks) and, as its last statements, locks the task rows of its
-- contracts in partition_key order. The trigger takes the load lock first
-- and no row lock besides its own new chunk; it does not read or lock task
-- rows. So a view insert and a load wait for each other only at the load
-- lock, and cannot deadlock. A transaction that inserts through the view and
-- then raises available with the producer API (records first, then the
-- task row, as the producer API asks) keeps the loader's order. One that
-- locks or changes task rows, contracts or tiers before its first insert
-- through the view takes them in the reverse order: a load that holds the
-- load lock and needs the same rows then deadlocks with it, and the server
-- ends one of the two (40P01), storing nothing of it. The load lock covers
-- every contract: inserts through the view, whatever their contract, wait
-- for loads and for each other, and a load waits (without lock_timeout)
-- until a transaction that inserted through the view ends.
--
-- The checks need a fresh snapshot after the lock is granted, which READ
-- COMMITTED gives each statement in the function. In REPEATABLE READ and
-- SERIALIZABLE the snapshot is the transaction's, taken before the insert
-- could wait, and a record committed meanwhile would be missed (loads run
-- in READ COMMITTED, so serializable checking does not cover them either):
-- inserts through the view are refused there (feature_not_supported).
--
-- Seqs. A load numbers a contract's new records from tasks.available + 1
-- and does not look for records stored above it. The inserter picks a
-- record's seq; it must now be at most one more than the contract's last
-- stored seq (check_violation otherwise), so that seqs stay dense (1 for a
-- contract without records). Records inserted through the view above
-- available then start at available + 1, the seq of a load's first chunk
-- for the contract, so such a load fails on record_chunks' primary key
-- instead of storing records over theirs; a producer that inserts them
-- raises available in the same transaction. A record further on could sit
-- inside a load's chunk that starts below it, where no key meets it.
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
    IF NEW.seq > coalesce(last_stored, 0) + 1 THEN
        RAISE EXCEPTION 'records: the next seq of contract % is %, not %', NEW.contract_id, coalesce(last_stored, 0) + 1, NEW.seq
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
