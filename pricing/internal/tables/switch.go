package tables

// SwitchSQL makes, for each contract of $1, its generation in $2 (the
// same place) current: the current one superseded, the new one (being
// priced, or a preview being approved) current, and
// contracts.current_generation set; with $3, the new one's pricing
// recorded as started now if it was not yet (a generation whose first
// batch caught up with its records starts and finishes in one
// transaction). All its CTEs see the statement's
// snapshot, so old is the generation current before it, and promoted
// runs after old (see there). It returns a row
// per contract, in $1's order: the contract, its old generation (0 if
// none was current) and the generation and contract rows it updated (1
// and 1). Three single-row updates a contract: no priced row is read or
// moved, and a group of contracts is one statement, not one each. The
// contracts must be distinct. Run it with $n placeholders as they are
// (database/sql's or pgx's), not through bun's formatting.
//
// Lock order: the rows are locked as the joins reach them, not in $1's
// order. Its callers hold every contract's task row first (a batch's
// fence, or the FOR UPDATE of an approval), or, for a contract in
// segments, its generation row (pricer's switchWhenLast), so no two
// transactions switch the same contract at once.
const SwitchSQL = `WITH m AS (
    SELECT * FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS m(contract_id, generation, i)
), old AS (
    UPDATE {{.Schema}}.generations g
       SET state = 'superseded', superseded_at = now()
      FROM {{.Schema}}.contracts c, m
     WHERE c.contract_id = m.contract_id AND g.contract_id = m.contract_id
       AND g.generation = c.current_generation AND g.state = 'current'
    RETURNING g.contract_id, g.generation
), after_old AS MATERIALIZED (
    -- Materialized, so computed once: as a subquery in promoted's FROM the
    -- planner could put it inside a nested loop and count old once per
    -- contract (12.8 s for an approval of 10,000).
    SELECT count(*) FROM old
), promoted AS (
    -- After old: after_old has its one row only once old has run to its
    -- end, and no row of promoted is updated before that row joins it.
    -- Each contract may have one current generation
    -- (generations_current, checked row by row), so a new one made
    -- current before the old one is superseded is refused.
    UPDATE {{.Schema}}.generations g
       SET state = 'current', finished_at = now(),
           pricing_started_at = CASE WHEN $3::boolean THEN coalesce(g.pricing_started_at, now()) ELSE g.pricing_started_at END
      FROM m, after_old
     WHERE g.contract_id = m.contract_id AND g.generation = m.generation AND g.state IN ('pricing', 'preview')
    RETURNING g.contract_id
), switched AS (
    UPDATE {{.Schema}}.contracts c SET current_generation = m.generation
      FROM m
     WHERE c.contract_id = m.contract_id
    RETURNING c.contract_id
)
SELECT m.contract_id, coalesce(o.generation, 0), coalesce(p.n, 0), coalesce(s.n, 0)
  FROM m
  LEFT JOIN old o ON o.contract_id = m.contract_id
  LEFT JOIN (SELECT contract_id, count(*) AS n FROM promoted GROUP BY contract_id) p ON p.contract_id = m.contract_id
  LEFT JOIN (SELECT contract_id, count(*) AS n FROM switched GROUP BY contract_id) s ON s.contract_id = m.contract_id
 ORDER BY m.i`
