-- Previews: a new generation priced without becoming current.
--
-- A preview (state preview) is started like any re-pricing (the
-- contract's partition is rewound and prices it under its own generation
-- number), but with the new tiers kept in its generation row and amended
-- amounts in amendments (preview true), not in the contract's tiers or
-- records; its batch that catches up does not switch. Meanwhile the
-- current generation stays what readers see, and stays complete: a
-- preview batch that prices records past base_position (records loaded
-- while the preview waits) prices them under the current generation too,
-- from base_checkpoint, and moves both on, in the same fenced commit.
--
-- worker generations approve makes a preview the contract's tiers and
-- amounts and switches to it (at once if it has caught up, or as any
-- generation being priced, by the batch that catches up); discard deletes
-- its rows and moves the partition back to the current generation at
-- base_position with base_checkpoint, so nothing of it is ever half
-- applied.

ALTER TABLE {{.Schema}}.generations DROP CONSTRAINT generations_state_check;
ALTER TABLE {{.Schema}}.generations ADD CONSTRAINT generations_state_check
    CHECK (state IN ('pricing', 'current', 'superseded', 'abandoned', 'pruned', 'preview', 'discarded'));

-- At most one generation of a contract is in progress, priced to become
-- current or as a preview.
CREATE UNIQUE INDEX generations_in_progress ON {{.Schema}}.generations (contract_id) WHERE state IN ('pricing', 'preview');

-- Of a preview: how far the current generation is priced (every record up
-- to base_position) and its checkpoint there.
ALTER TABLE {{.Schema}}.generations ADD COLUMN base_position bigint;
ALTER TABLE {{.Schema}}.generations ADD COLUMN base_checkpoint jsonb;

-- An amendment of a preview: the record's amount is unchanged until the
-- preview is approved.
ALTER TABLE {{.Schema}}.amendments ADD COLUMN preview boolean NOT NULL DEFAULT false;

-- Whoever may write record chunks (the loader, which starts re-pricings
-- and previews) approves and discards previews: it switches the current
-- generation and removes a discarded preview's amendments.
DO $$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
               FROM pg_class c, aclexplode(c.relacl) a
              WHERE c.oid = '{{.Schema}}.record_chunks'::regclass AND a.grantee <> 0 AND a.grantee <> c.relowner
                AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT UPDATE (current_generation) ON {{.Schema}}.contracts TO %s', g.role);
        EXECUTE format('GRANT UPDATE (preview), DELETE ON {{.Schema}}.amendments TO %s', g.role);
    END LOOP;
END $$;
