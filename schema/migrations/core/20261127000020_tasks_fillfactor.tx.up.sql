-- Fill factor 70 instead of 30 for the task rows. Measured with a pinned
-- horizon (bench horizon: 2,000 contracts, 600,000 records, two
-- workers), 30 and 70 gave the same share of heap-only updates (every
-- checkpoint; only changes of ownership are ordinary updates), while 30
-- doubled the table and had each page pruned at nearly every access
-- (a page is pruned once its free space falls below what the fill factor
-- leaves). New pages are filled to 70%; existing ones keep what they
-- have until their rows move.
ALTER TABLE {{.Schema}}.tasks SET (fillfactor = 70);
