-- Each chunk's gross: the sum of its amounts, computed by the server
-- whenever a chunk is written (a load, an amendment) so that no writer can
-- get it wrong. A contract's cumulative gross after any chunk is then its
-- earlier chunks' grosses added up, without reading their records: a
-- pricing worker splitting a contract's backlog into segments
-- (distributor.Splitter) reads it for every chunk boundary it splits at,
-- and each segment starts from the cumulative gross there.
--
-- Adding a stored generated column rewrites the table once, filling it for
-- every chunk already stored.
CREATE FUNCTION {{.Schema}}.chunk_gross(amounts bigint[]) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT sum(a)::bigint FROM unnest(amounts) AS a $$;

ALTER TABLE {{.Schema}}.record_chunks
    ADD COLUMN gross_minor bigint GENERATED ALWAYS AS ({{.Schema}}.chunk_gross(amounts)) STORED;
