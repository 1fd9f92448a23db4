// Package faults is baton's fault-injection suite. Its tests run real
// worker binaries against a real PostgreSQL, inject faults — SIGKILL at
// random moments, SIGSTOP past the lease, database restarts (fast and
// immediate), network partitions, latency and connection resets through a
// Toxiproxy in front of the database, loads while workers run, graceful stop
// of every worker at once — wait for the workers to finish, and compare the
// export with an independent recomputation from the input files (and the
// SQL verification): every accepted record priced exactly once with exactly
// the right amounts, no worker exiting non-zero unless it was killed.
//
// It lives in the e2e module (e2e/go.mod), beside the library's module, so
// that Toxiproxy and its dependencies stay out of the library's
// requirements. A short randomized run is part of every "go test ./..." in
// e2e/ (and so of "make test"); its seed is printed, and BATON_SEED=<seed>
// replays it. "go test ./faults -long" in e2e/ (or BATON_FAULTS_LONG=1)
// runs larger data, more faults and several schedules per scenario for soak
// use. The suite prints a summary: schedules
// run, faults injected, records checked, discrepancies, takeover time
// percentiles.
//
// TestSoak (soak_test.go, "make soak") mixes all of these on many
// processes at once, with operator faults beside them (re-rating and
// rewinds while batches run, prunes beside re-deliveries:
// soak_operator_test.go), and BATON_SOAK_HA=1 runs it on a three-node
// pg_auto_failover formation, killing its primary (soak_ha_test.go).
package faults
