package main

// rerateSection renders the rerate scenario: a re-pricing after a tier
// change against the first pricing, and an amendment's suffix.
func rerateSection(w writer, r *results) {
	s := r.Rerate
	if s == nil {
		return
	}
	w("## Re-rating\n\n")
	w("A tier change for every tenth contract of %s contracts × %s records (`worker load --tiers --reprice`), re-priced by %d `worker run --until-done` processes at default flags, "+
		"against the same processes' first pricing of all the records in the same database (seed %d). Records/s of the re-pricing count the records it re-priced. "+
		"The contracts not named must keep generation 1 and priced rows identical (fingerprint before and after), and `pricer.Verify` must pass after the switch.\n\n",
		count(int64(s.Contracts)), count(s.Records/int64(max(1, s.Contracts))), s.Workers, s.Seed)
	if s.First.Seconds == 0 {
		w("The scenario failed before its first pricing: %s\n\n", oneLine(s.Error, 300))
		return
	}
	w("| run | records | seconds | records/s |\n|---|---|---|---|\n")
	w("| first pricing, all contracts | %s | %.1f | %s |\n", count(s.First.Records), s.First.Seconds, rate(s.First.PerSec))
	if s.Reprice.Seconds > 0 {
		w("| re-pricing of %d contracts after a tier change | %s | %.1f | %s |\n", s.Retiered, count(s.Reprice.Records), s.Reprice.Seconds, rate(s.Reprice.PerSec))
		w("\nRe-pricing ÷ first pricing: **%.2f×** records/s. Contracts not named untouched: %s. Verified: %s.\n\n", s.Ratio, yesNo(s.Untouched), yesNo(s.Verified))
	}
	if s.Amend.Seconds > 0 {
		w("An amendment of record %s of one contract of %s records (`worker load --records --amend`): **%s records re-priced** (the amended record and those after it; the %s before it keep their amounts), "+
			"in %.2f s, against %.2f s for the contract's first pricing. Verified: %s.\n\n",
			count(s.AmendedSeq), count(s.AmendContract), count(s.Amend.Records), count(s.AmendedSeq-1), s.Amend.Seconds, s.AmendFirst.Seconds, yesNo(s.AmendVerified))
	}
	w("A re-priced record is written three times where a first pricing writes it once: its batch copies it into `priced_pending`, and the switch that makes the generation current " +
		"moves the rows it replaces from `priced` to `priced_superseded` and the new ones from `priced_pending` into `priced`, so that readers of `priced` never see a generation half written. " +
		"Those moves, not the pricing, are most of a re-pricing's database time.\n\n")
	if s.Error != "" {
		w("The scenario failed: %s\n\n", oneLine(s.Error, 300))
	}
}
