-- Generations: a partition's work can be processed again from an earlier
-- position (partition.Store.Rewind), for example to re-price a contract
-- after its tiers changed. Each rewind starts a new generation of the
-- partition's output; the checkpoint a batch fences carries it, so a
-- processor writes what it produces under the generation it belongs to.
-- A rewind also bumps the version, which fences out the claim that was
-- processing the previous generation.
--
-- A constant default: the column is added without rewriting the table.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN generation bigint NOT NULL DEFAULT 1;
ALTER TABLE {{.Schema}}.tasks ADD CONSTRAINT tasks_generation_positive CHECK (generation >= 1) NOT VALID;
