package main

import "fmt"

// rerateSection renders the rerate scenario: a re-pricing after a tier
// change against the first pricing, and an amendment's suffix.
func rerateSection(w writer, r *results) {
	s := r.Rerate
	if s == nil {
		return
	}
	w("## Re-rating\n\n")
	spread := ""
	if s.Shape != "" && s.Shape != "uniform" {
		spread = fmt.Sprintf(" on average, spread %s (`worker seed --shape`)", s.Shape)
	}
	w("%s contracts × %s records%s (seed %d), priced by %d `worker run --until-done` processes at default flags; then, back to back in the same database with the same processes, "+
		"a tier change of %d of the contracts (`worker load --tiers --reprice`), an amendment of each contract's middle record (`worker load --records --amend`) "+
		"and a preview of another tier change of every contract (`worker load --tiers --reprice --preview`, then `worker generations approve`). "+
		"Records/s of a re-pricing count the records it re-priced (all of a re-tiered contract's; an amended contract's from the amended record on). "+
		"The contracts not named must keep their generation and priced rows identical (fingerprint before and after), and `pricer.Verify` must pass after each switch.\n\n",
		count(int64(s.Contracts)), count(s.Records/int64(max(1, s.Contracts))), spread, s.Seed, s.Workers, s.Retiered)
	if s.First.Seconds == 0 {
		w("The scenario failed before its first pricing: %s\n\n", oneLine(s.Error, 300))
		return
	}
	w("| run | records | seconds | records/s | ÷ first pricing |\n|---|---|---|---|---|\n")
	w("| first pricing, all contracts | %s | %.1f | %s | 1.00× |\n", count(s.First.Records), s.First.Seconds, rate(s.First.PerSec))
	if s.Reprice.Seconds > 0 {
		w("| re-pricing of %d contracts after a tier change | %s | %.1f | %s | **%.2f×** |\n", s.Retiered, count(s.Reprice.Records), s.Reprice.Seconds, rate(s.Reprice.PerSec), s.Ratio)
	}
	if s.Amend.Seconds > 0 {
		w("| re-pricing after an amendment of each contract's middle record | %s | %.1f | %s | **%.2f×** |\n", count(s.Amend.Records), s.Amend.Seconds, rate(s.Amend.PerSec), s.AmendRatio)
	}
	if s.Preview.Seconds > 0 {
		w("| pricing of a preview of a tier change of every contract (`--preview`) | %s | %.1f | %s | **%.2f×** |\n", count(s.Preview.Records), s.Preview.Seconds, rate(s.Preview.PerSec), s.PreviewRatio)
	}
	if s.Reprice.LoadSeconds > 0 || s.Amend.LoadSeconds > 0 || s.Preview.LoadSeconds > 0 {
		w("\nThe load command that starts each re-pricing (not counted above; process start included) took %.2f s for the tier change, %.2f s for the amendment and %.2f s for the preview.\n",
			s.Reprice.LoadSeconds, s.Amend.LoadSeconds, s.Preview.LoadSeconds)
	}
	w("\nContracts not named untouched: %s. Verified after the tier change: %s; after the amendment: %s.\n\n", yesNo(s.Untouched), yesNo(s.Verified), yesNo(s.AmendVerified))
	if s.Preview.Seconds > 0 {
		w("`worker generations approve` made every caught-up preview current in %.2f s (the command, process start included; one transaction: per contract its tiers replaced and the three-row switch); verified after it: %s.\n\n",
			s.ApproveSeconds, yesNo(s.PreviewVerified))
	}
	w("A re-priced record is written once, as in a first pricing: its batch writes it into `priced_rows` under its generation, where it stays, and the switch that makes the generation current " +
		"updates the contract's current generation (three rows, whatever the contract's size); readers see each contract's current generation through the `priced` view.\n\n")
	if s.Error != "" {
		w("The scenario failed: %s\n\n", oneLine(s.Error, 300))
	}
}
