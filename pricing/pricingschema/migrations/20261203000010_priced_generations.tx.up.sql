-- A re-priced record is written once: a generation's batches write their
-- rows where they stay, and the switch to it only changes which generation
-- is current.
--
-- priced becomes priced_rows with a generation column: every priced row of
-- every generation kept, keyed (contract_id, seq, generation). A
-- generation's rows are only the records it priced itself (after its
-- from_seq, or, for generation 1, all); the prefix it shares with the
-- generation before stays that generation's rows. Generation G's view of a
-- contract is therefore, for each seq, the row of the greatest generation
-- <= G (priced_generation below), and the contract's current rows are its
-- current generation's view (the priced view, with the former table's
-- columns, so that its readers are unchanged). Generations are linear (a
-- new one starts from the current one), an abandoned generation's rows are
-- deleted with it, and a generation being priced is newer than the current
-- one, so no other row can be the greatest <= G.
--
-- Readers see one generation per contract: the priced view reads
-- contracts.current_generation and the rows in one snapshot, and the switch
-- (pricer.switchGeneration) sets current_generation in the batch that wrote
-- the generation's last rows.

ALTER TABLE {{.Schema}}.priced RENAME TO priced_rows;
ALTER TABLE {{.Schema}}.priced_rows ADD COLUMN generation bigint NOT NULL DEFAULT 1;
ALTER TABLE {{.Schema}}.priced_rows ALTER COLUMN generation DROP DEFAULT;

-- priced held each re-priced contract's current view: a row's generation is
-- the one that priced it, the newest current or superseded generation
-- whose from_seq is before its seq (generation 1's from_seq is 0).
UPDATE {{.Schema}}.priced_rows p
   SET generation = (SELECT max(g.generation) FROM {{.Schema}}.generations g
                      WHERE g.contract_id = p.contract_id AND g.state IN ('current', 'superseded') AND g.from_seq < p.seq)
 WHERE p.contract_id IN (SELECT contract_id FROM {{.Schema}}.generations WHERE generation > 1 AND state IN ('current', 'superseded'))
   AND (SELECT max(g.generation) FROM {{.Schema}}.generations g
         WHERE g.contract_id = p.contract_id AND g.state IN ('current', 'superseded') AND g.from_seq < p.seq) > 1;

ALTER TABLE {{.Schema}}.priced_rows DROP CONSTRAINT priced_pkey;
-- generation DESC: a generation's view reads each seq's newest row first.
CREATE UNIQUE INDEX priced_rows_key ON {{.Schema}}.priced_rows (contract_id, seq, generation DESC);

INSERT INTO {{.Schema}}.priced_rows
    (contract_id, seq, generation, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
SELECT contract_id, seq, generation, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at
  FROM {{.Schema}}.priced_pending
UNION ALL
SELECT contract_id, seq, generation, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at
  FROM {{.Schema}}.priced_superseded;

-- Whoever could delete pending rows (the loader, abandoning a generation)
-- deletes a generation's rows.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.priced_pending'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'DELETE'
    LOOP
        EXECUTE format('GRANT SELECT, DELETE ON {{.Schema}}.priced_rows TO %s', g.role);
    END LOOP;
END $$;

DROP TABLE {{.Schema}}.priced_pending, {{.Schema}}.priced_superseded;

-- Generation gen's view of contract: for each seq, the row of the greatest
-- generation <= gen. The one definition of "generation G's rows"; a SQL
-- function the planner inlines, so a caller's conditions on seq reach the
-- index.
CREATE FUNCTION {{.Schema}}.priced_generation(contract text, gen bigint)
RETURNS TABLE (contract_id text, seq bigint, record_id text, gross_minor bigint, discount_minor bigint, net_minor bigint,
               claim_version bigint, priced_by text, priced_at timestamptz, generation bigint)
LANGUAGE sql STABLE AS $$
SELECT DISTINCT ON (r.seq) r.contract_id, r.seq, r.record_id, r.gross_minor, r.discount_minor, r.net_minor,
       r.claim_version, r.priced_by, r.priced_at, r.generation
  FROM {{.Schema}}.priced_rows r
 WHERE r.contract_id = $1 AND r.generation <= $2
 ORDER BY r.seq, r.generation DESC
$$;

-- The current rows of every contract: the one definition of "current", the
-- rule of priced_generation with each contract's current generation. It
-- is written as a join rather than through the function so that a reader
-- of every contract in key order (export) gets a merge join and no sort,
-- and a reader of one contract an index scan of its rows.
CREATE VIEW {{.Schema}}.priced AS
SELECT DISTINCT ON (r.contract_id, r.seq)
       r.contract_id, r.seq, r.record_id, r.gross_minor, r.discount_minor, r.net_minor,
       r.claim_version, r.priced_by, r.priced_at, r.generation
  FROM {{.Schema}}.priced_rows r
  JOIN {{.Schema}}.contracts c ON c.contract_id = r.contract_id AND r.generation <= c.current_generation
 ORDER BY r.contract_id, r.seq, r.generation DESC;

-- SQL that wrote priced directly (tests, tools) still may: a row inserted
-- through the view is a row of its contract's current generation (the
-- contract is created if it does not exist, as the view reads contracts),
-- and an update or delete changes the row the view shows.
CREATE FUNCTION {{.Schema}}.priced_write() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {{.Schema}}.contracts (contract_id) VALUES (NEW.contract_id) ON CONFLICT DO NOTHING;
        NEW.generation := coalesce(NEW.generation,
            (SELECT current_generation FROM {{.Schema}}.contracts WHERE contract_id = NEW.contract_id));
        NEW.priced_at := coalesce(NEW.priced_at, now());
        INSERT INTO {{.Schema}}.priced_rows
            (contract_id, seq, generation, record_id, gross_minor, discount_minor, net_minor, claim_version, priced_by, priced_at)
        VALUES (NEW.contract_id, NEW.seq, NEW.generation, NEW.record_id, NEW.gross_minor, NEW.discount_minor, NEW.net_minor,
                NEW.claim_version, NEW.priced_by, NEW.priced_at);
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE {{.Schema}}.priced_rows
           SET contract_id = NEW.contract_id, seq = NEW.seq, generation = NEW.generation, record_id = NEW.record_id,
               gross_minor = NEW.gross_minor, discount_minor = NEW.discount_minor, net_minor = NEW.net_minor,
               claim_version = NEW.claim_version, priced_by = NEW.priced_by, priced_at = NEW.priced_at
         WHERE contract_id = OLD.contract_id AND seq = OLD.seq AND generation = OLD.generation;
        RETURN NEW;
    END IF;
    DELETE FROM {{.Schema}}.priced_rows WHERE contract_id = OLD.contract_id AND seq = OLD.seq AND generation = OLD.generation;
    RETURN OLD;
END $$;

CREATE TRIGGER priced_write INSTEAD OF INSERT OR UPDATE OR DELETE ON {{.Schema}}.priced
    FOR EACH ROW EXECUTE FUNCTION {{.Schema}}.priced_write();

-- Whoever may read the rows may read the view and call the function.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.priced_rows'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'SELECT'
    LOOP
        EXECUTE format('GRANT SELECT ON {{.Schema}}.priced TO %s', g.role);
    END LOOP;
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role, a.privilege_type AS priv
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.priced_rows'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE')
    LOOP
        EXECUTE format('GRANT %s ON {{.Schema}}.priced TO %s', g.priv, g.role);
    END LOOP;
END $$;

-- Totals are no longer frozen at the switch (which does not read the rows):
-- a generation's totals are its view's, read when asked, and frozen when
-- worker prune removes its rows; the generation row stays, state pruned,
-- with when it was pruned.
ALTER TABLE {{.Schema}}.generations DROP CONSTRAINT generations_state_check;
ALTER TABLE {{.Schema}}.generations ADD CONSTRAINT generations_state_check
    CHECK (state IN ('pricing', 'current', 'superseded', 'abandoned', 'pruned'));
ALTER TABLE {{.Schema}}.generations ADD COLUMN pruned_at timestamptz;

-- When workers started pricing the generation: its first batch's commit
-- (started_at is when it was requested, by a load or worker reprice;
-- finished_at when it became current). NULL for generation 1 and for
-- generations converted from the former layout.
ALTER TABLE {{.Schema}}.generations ADD COLUMN pricing_started_at timestamptz;
