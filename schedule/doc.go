// Package schedule runs scheduled jobs across a farm of workers: each due
// time of a job runs once, on one worker, whichever workers are up, on the
// same lease machinery as baton's partitions.
//
// # Jobs
//
// A job (Definition) has a name, a schedule, a mode and what it runs. The
// schedule is either Every, a fixed interval whose slots are its multiples
// since the Unix epoch (so every worker computes the same ones), or Cron, a
// five-field expression in UTC. Slots are due times on the database's
// clock, never a worker's. What runs is a function registered in code
// (Scheduler.Register with a Job), an external command (Command, its argv)
// or a built-in (Builtin); stored jobs that are not registered in code run
// through Config.Resolve. Add, Remove, Trigger and List manage the stored
// jobs (table jobs) from any process, with or without a scheduler running.
//
// # Once per slot
//
// A scheduler claims a due job by a compare-and-set on the job row's
// version, as a partition is claimed, and holds it under a lease renewed by
// a heartbeat (package heartbeat). The run's RunFunc gets a Run: its Slot,
// its Fence (the row's version) and an IdempotencyKey (job@slot) that is
// the same for every attempt at the slot. A run completes by recording the
// slot and the next one in the row, fenced by the version it claimed, so a
// slot is recorded done once. A worker that dies or stops renewing during
// a run loses its lease after StaleAfter; another worker takes the job
// over, waits Confirm renewals and runs the slot again (Run.Takeover). A
// run's own database writes can be made exactly once by making them in a
// transaction that calls Run.Check, which locks the job row while this run
// still holds it: the writes commit only if no takeover happened. Side
// effects elsewhere use the fence or the idempotency key.
//
// LockAtMostFor bounds a run: its context is cancelled when it is reached
// and its lease is no longer renewed. LockAtLeastFor spaces runs' starts.
// Missed slots (no worker was up) are skipped but for the latest
// (MissedSkip) or run in order (MissedCatchUp).
//
// # Modes
//
// ModeLock releases the job after each run, so the next slot may run
// anywhere; ModeExpire stops renewing the lease after the run and lets it
// run out, so no worker starts the job again before it has; ModeLeader keeps the job
// (the lease renewed between runs) on the same worker while it lives.
//
// # Running a scheduler
//
// New validates a Config (defaults documented on its fields); Run claims
// and runs due jobs until its context is cancelled, then lets runs in
// progress finish within ShutdownTimeout and releases every job it holds.
package schedule
