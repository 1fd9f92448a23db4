-- Stand-in for the engine's rewind: a partition's checkpoint generation.
ALTER TABLE {{.Schema}}.tasks ADD COLUMN generation bigint NOT NULL DEFAULT 1;
