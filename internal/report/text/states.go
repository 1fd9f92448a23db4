package text

// StatesHelp documents the states a status shows, for the --help of the
// commands that show them.
const StatesHelp = `States:
  pending      unowned, records waiting to be priced
  confirming   taken over from a worker that stopped heartbeating; the new
               owner confirms its claim over --confirm heartbeats before its
               first batch (0 records/s meanwhile)
  active       held by a live worker, records waiting
  caught_up    held by a live worker, nothing waiting (leader mode)
  stale        its owner stopped heartbeating; another worker takes it over
  backoff      a batch failed; retried after an exponential back-off
  quarantined  failed --max-attempts times; needs "worker retry CONTRACT"
  done         unowned, every record priced
  A contract split into segments (run --segment-records), which several
  workers price at once, is in the most pressing state of its own and its
  segments' (one quarantined makes it quarantined, one being priced makes
  it active); the SEGMENTS column counts those not caught up, and held.
  inconsistent an error: its checkpoint (or the records announced to the
               workers) lies beyond its stored records, so records were
               skipped or something other than the loader added work;
               "export --complete" refuses to export`
