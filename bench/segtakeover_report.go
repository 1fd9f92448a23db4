package main

import "strings"

// segTakeoverHeadline renders the scenario's headline rows.
func segTakeoverHeadline(w writer, r *results) {
	s := r.SegTakeover
	if s == nil || s.Takeover.N == 0 {
		return
	}
	w("| segment crash takeover p99 at %s (%d kills, %d segments taken over; survivors below MaxPartitions) | ≤ `docs/protocol.md` bound: stale-after + poll + confirm × heartbeat + one batch (%.1f s) = %.1f s | %.2f s from the kill (p50 %.2f s, max %.2f s; from the freeze before it p99 %.2f s; %d did not resume) | %s |\n",
		s.Timing, len(s.Kills), s.Takeover.N, s.BatchAllowanceS, s.BoundS+s.BatchAllowanceS, s.Takeover.P99/1000, s.Takeover.P50/1000, s.Takeover.Max/1000, s.FromFreeze.P99/1000, s.TimedOut, yesNo(s.within()))
	w("| records duplicated / lost over the segment kills (primary key removed; %s records) | 0 / 0 | %d / %d (%d contracts failing verification) | %s |\n",
		count(s.Records), s.Duplicates, s.Lost, s.Mismatches, yesNo(s.Duplicates == 0 && s.Lost == 0 && s.Mismatches == 0 && s.Priced == s.Records))
}

// segTakeoverSection renders the segtakeover scenario.
func segTakeoverSection(w writer, r *results) {
	s := r.SegTakeover
	if s == nil {
		return
	}
	w("## Segment takeover after a crash\n\n")
	w("%d `worker run` processes (no `--until-done`; %s, `--batch-size %d`, `--segment-records %s`, `--max-partitions` at its default %d) over %s records seeded with `--shape %s` (%d contracts; %s in `%s`), "+
		"while a producer appends %s records to `%s` with baton's loader whenever fewer than %s are pending, so that the contract is split into segments again and again (%d loads, %s records). "+
		"Repeatedly, after a settling pause (1.5 s) and once at most %d partitions have pending work (so the survivors have room for all of them: the bound assumes a survivor below MaxPartitions), "+
		"the worker holding the most segments with pending work is frozen for an instant, its segments read (`segment_of IS NOT NULL`, owner `name#…`), and SIGKILLed; "+
		"for each of those segments the time from the kill to the first batch another worker committed on it is the `first_batch` event of that segment key, by its row's %s, against the kill time on the database clock (bench clock plus the offset measured at the start); "+
		"then a replacement worker is started. At the end the producer stops, the workers drain the backlog, and duplicates and unpriced records are counted (primary key of `priced` replaced by a plain index) and the output verified (`pricer.Verify`).\n\n",
		s.Workers, s.Timing, s.Batch, count(int64(s.SegmentRecords)), s.MaxPartitions, count(s.Seeded), s.Shape, s.Contracts, count(s.HotSeeded), s.HotContract,
		count(int64(s.Chunk)), s.HotContract, count(int64(s.LowWater)), s.Loads, count(s.Produced),
		(s.Workers-1)*s.MaxPartitions, map[bool]string{true: "commit timestamp", false: "insertion time (the server does not track commit timestamps)"}[s.CommitTS])
	bound := s.BoundS + s.BatchAllowanceS
	w("Bound (`docs/protocol.md`): stale-after + poll (= heartbeat) + confirm × heartbeat + one batch = %.1f s + %.1f s = %.1f s. Percentiles are nearest-rank over segments.\n\n", s.BoundS, s.BatchAllowanceS, bound)
	w("| kills | segments taken over | from the kill: p50 | p90 | p99 | max | within the bound | from the freeze: p50 / p99 / max | within the bound | did not resume | `takeover_ms` of the events (from the victim's last heartbeat) p50 / p99 / max (events carrying it) | segments made | duplicated | lost | failing verification | priced / records | drained |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	w("| %d | %d | %s | %s | %s | %s | %s | %s / %s / %s | %s | %d | %s / %s / %s (%d) | %d | %d | %d | %d | %s / %s | %s |\n\n",
		len(s.Kills), s.Takeover.N, ms(s.Takeover.P50), ms(s.Takeover.P90), ms(s.Takeover.P99), ms(s.Takeover.Max), yesNo(s.within()),
		ms(s.FromFreeze.P50), ms(s.FromFreeze.P99), ms(s.FromFreeze.Max), yesNo(s.TimedOut == 0 && s.FromFreeze.N > 0 && s.FromFreeze.P99/1000 <= bound), s.TimedOut,
		ms(s.EventTakeover.P50), ms(s.EventTakeover.P99), ms(s.EventTakeover.Max), s.EventTakeover.N, s.SegmentRows, s.Duplicates, s.Lost, s.Mismatches, count(s.Priced), count(s.Records), yesNo(s.Drained))
	w("The victim sends nothing from the freeze on, so \"from the freeze\" (the kill time plus the freeze before it, about %s) times the takeover from the moment the worker stopped, as a crash would; "+
		"\"from the kill\" is timed as the failover scenario times its kills, from the signal. The events' own `takeover_ms` starts earlier still, at the victim's last heartbeat before the freeze.\n\n", frozenMedian(s))
	w("Every kill: victim, segments held (other partitions held), partitions with pending work, seconds frozen before the kill, seconds from the kill to each segment's first batch by another worker:\n\n")
	for _, k := range s.Kills {
		var vals []string
		for _, x := range k.EachS {
			vals = append(vals, secs(x))
		}
		w("- %s: %d (%d), %d, %.2f s: %s\n", k.Victim, len(k.Segments), k.OtherHeld, k.Pending, k.FrozenS, strings.Join(vals, ", "))
	}
	e := s.WorkerEvents
	w("\nWorker protocol events (all workers' logs): %d claimed, %d takeovers, %d released, %d lost, %d fenced, %d failed.\n\n", e.Claimed, e.Takeovers, e.Released, e.Lost, e.Fenced, e.Failed)
	if len(s.LostCauses) > 0 {
		w("Lost events in the events table (a live worker stopped processing a partition it held; another worker took it over later, which the duplicate and verification checks cover), by cause (numbers and keys as N):\n\n")
		for _, c := range s.LostCauses {
			kind := "contract"
			if c.Segment {
				kind = "segment"
			}
			when := "before the first kill"
			if c.DuringKills {
				when = "from the first kill on"
			}
			w("- %d × %s, %s: %s\n", c.N, kind, when, oneLine(c.Cause, 200))
		}
		w("\n")
	}
	if s.Error != "" {
		w("The scenario failed: %s\n\n", oneLine(s.Error, 300))
	}
}

// frozenMedian is the median time a victim was frozen before its kill.
func frozenMedian(s *segTakeoverResult) string {
	var v []float64
	for _, k := range s.Kills {
		v = append(v, k.FrozenS*1000)
	}
	if len(v) == 0 {
		return "—"
	}
	return ms(summarizeMs(v).P50)
}
