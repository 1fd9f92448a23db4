-- Consumption records are stored in chunks: one row holds up to 1,024
-- consecutive records of one contract from one load, their record ids and
-- amounts as arrays in seq order (record_ids[i] has seq first_seq + i - 1).
-- A load writes one row per chunk instead of one per record, which is what
-- lets it run near the speed of a plain COPY: a row per record costs the
-- server a heap tuple and two index entries each. records is now a view
-- with the former table's columns, so every reader's SQL is unchanged.
--
-- Record ids are unique within a contract. No index can say so over arrays;
-- the loader enforces it (ingest/doc.go), and the priced table's primary key
-- still makes pricing a record twice impossible.
CREATE TABLE {{.Schema}}.record_chunks (
    contract_id text COLLATE "C" NOT NULL,
    first_seq   bigint NOT NULL,
    last_seq    bigint NOT NULL,
    load_id     bigint NOT NULL,
    record_ids  text[] COLLATE "C" NOT NULL,
    amounts     bigint[] NOT NULL,
    PRIMARY KEY (contract_id, first_seq),
    CONSTRAINT record_chunks_seqs CHECK (first_seq >= 1 AND last_seq >= first_seq AND last_seq - first_seq < 1024),
    CONSTRAINT record_chunks_lengths CHECK (
        array_ndims(record_ids) = 1 AND array_lower(record_ids, 1) = 1 AND cardinality(record_ids) = last_seq - first_seq + 1 AND
        array_ndims(amounts) = 1 AND array_lower(amounts, 1) = 1 AND cardinality(amounts) = last_seq - first_seq + 1),
    CONSTRAINT record_chunks_values CHECK (
        array_position(record_ids, NULL) IS NULL AND array_position(amounts, NULL) IS NULL AND
        1 <= ALL (amounts) AND 1000000000000 >= ALL (amounts))
);
-- A chunk's arrays (about 20 KB for 1,024 records) are stored out of line
-- uncompressed: the default compression (pglz) made a load's COPY ten times
-- slower, for a factor of two in size.
ALTER TABLE {{.Schema}}.record_chunks ALTER COLUMN record_ids SET STORAGE EXTERNAL,
                                      ALTER COLUMN amounts SET STORAGE EXTERNAL;

-- The stored records, chunked: each contract's runs of consecutive seqs
-- from one load, cut every 1,024 records.
INSERT INTO {{.Schema}}.record_chunks (contract_id, first_seq, last_seq, load_id, record_ids, amounts)
SELECT contract_id, min(seq), max(seq), load_id,
       array_agg(record_id ORDER BY seq), array_agg(amount_minor ORDER BY seq)
  FROM (SELECT r.*, (row_number() OVER (PARTITION BY contract_id, load_id, run ORDER BY seq) - 1) / 1024 AS part
          FROM (SELECT r.*, seq - row_number() OVER (PARTITION BY contract_id, load_id ORDER BY seq) AS run
                  FROM {{.Schema}}.records r) r) r
 GROUP BY contract_id, load_id, run, part
 ORDER BY contract_id, min(seq);

-- Whoever could read the records table can read the view and the chunks;
-- whoever could insert records can insert chunks.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role, a.privilege_type AS priv
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.records'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type IN ('SELECT', 'INSERT')
    LOOP
        IF g.priv = 'SELECT' THEN
            EXECUTE format('GRANT SELECT ON {{.Schema}}.record_chunks TO %s', g.role);
        ELSE
            EXECUTE format('GRANT INSERT ON {{.Schema}}.record_chunks TO %s', g.role);
        END IF;
    END LOOP;
    CREATE TEMP TABLE record_grants ON COMMIT DROP AS
    SELECT DISTINCT a.grantee::regrole::text AS role
      FROM pg_class c, aclexplode(c.relacl) a
     WHERE c.oid = '{{.Schema}}.records'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
       AND a.privilege_type = 'SELECT';
END $$;

DROP TABLE {{.Schema}}.records;

-- The records, one row each, with the former table's columns.
CREATE VIEW {{.Schema}}.records AS
SELECT c.contract_id, c.first_seq + u.i - 1 AS seq, u.record_id, u.amount_minor, c.load_id
  FROM {{.Schema}}.record_chunks c
 CROSS JOIN LATERAL unnest(c.record_ids, c.amounts) WITH ORDINALITY AS u (record_id, amount_minor, i);

DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT role FROM record_grants LOOP
        EXECUTE format('GRANT SELECT ON {{.Schema}}.records TO %s', g.role);
    END LOOP;
END $$;
