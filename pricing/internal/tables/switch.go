package tables

// SwitchSQL makes generation $2 of contract $1 current: the current one
// superseded, $2 (being priced, or a preview being approved) current,
// contracts.current_generation set. All its CTEs see the statement's
// snapshot, so old is the generation current before it. It returns the
// old generation and the rows updated. Three single-row updates: no
// priced row is read or moved. Run it with $n placeholders as they are
// (database/sql's or pgx's), not through bun's formatting.
const SwitchSQL = `WITH old AS (
    UPDATE {{.Schema}}.generations g
       SET state = 'superseded', superseded_at = now()
      FROM {{.Schema}}.contracts c
     WHERE c.contract_id = $1 AND g.contract_id = $1 AND g.generation = c.current_generation AND g.state = 'current'
    RETURNING g.generation
), promoted AS (
    UPDATE {{.Schema}}.generations
       SET state = 'current', finished_at = now()
     WHERE contract_id = $1 AND generation = $2 AND state IN ('pricing', 'preview')
    RETURNING 1
), switched AS (
    UPDATE {{.Schema}}.contracts SET current_generation = $2 WHERE contract_id = $1
    RETURNING 1
)
SELECT coalesce((SELECT generation FROM old), 0), (SELECT count(*) FROM promoted), (SELECT count(*) FROM switched)`
