package main

import "fmt"

// latencySection renders the latency scenario: items/s of a
// latency-bound processor by worker count, with and without segments.
func latencySection(w writer, r *results) {
	s := r.Latency
	if s == nil {
		return
	}
	w("## A latency-bound processor\n\n")
	w("A stand-in processor (a `distributor.Splitter`, kind `%s`) waits %.0f ms per batch, as a call to another service would, then writes one row naming the items it processed; "+
		"it has no per-item state, so it splits anywhere, and its checkpoint state is the position, checked against the checkpoint's. "+
		"One partition holds %s items (%.0f %%), %d others %s each: %s items. "+
		"They are processed, in fresh copies of one database, by 1 … %d distributors in the bench process (`distributor.New`, each with its own name and connection pool) "+
		"at default flags except `BatchSize` %s (batches of a fixed size: %s per segment), each with `MaxPartitions` %d and `UntilDone`, timed from the start until all have returned; "+
		"with segments (`SegmentRecords` at its default, %s) and without (larger than any partition), alternating. "+
		"Such a processor's throughput is its batches in flight over the wait: one per held partition, at most `MaxPartitions` per worker. "+
		"Every run is checked exactly once: each partition's output rows tile its items 1 … available without a gap or an overlap, add up to the items produced, and `partition_progress` has nothing pending.\n\n",
		latencyKind, s.WaitMs, count(s.Hot), 100*float64(s.Hot)/float64(max(1, s.Items)), s.Small, count(s.SmallItems), count(s.Items),
		maxWorkers(s), count(int64(s.BatchSize)), count(s.SegmentRecords/int64(max(1, s.BatchSize))), s.MaxPartitions, count(s.SegmentRecords))
	w("Goal: with segments, %.0f× the items/s from 1 to 4 workers.\n\n", latencyGoal)
	if g, ok := s.speedup(4, true); ok {
		met := "met"
		if g < latencyGoal {
			met = "**not met**"
		}
		w("Measured: **%.2f×** (%s).\n\n", g, met)
	}
	w("| workers | with segments items/s | speed-up vs 1 worker | without segments items/s | speed-up vs 1 worker | with ÷ without | seconds with / without | batches | segments | database + bench process CPU s, with / without | exactly once |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	seen := map[int]bool{}
	for _, x := range s.Runs {
		if seen[x.Workers] {
			continue
		}
		seen[x.Workers] = true
		n := x.Workers
		with, okw := s.run(n, true)
		without, oko := s.run(n, false)
		cell := func(run latencyRun, ok bool, segments bool) (string, string) {
			if !ok {
				return "failed", "—"
			}
			g, _ := s.speedup(n, segments)
			sp := "—"
			if g > 0 {
				sp = fmt.Sprintf("%.2f×", g)
			}
			return rate(run.PerSec), sp
		}
		wr, ws := cell(with, okw, true)
		or, osp := cell(without, oko, false)
		ratio := "—"
		if okw && oko {
			ratio = fmt.Sprintf("%.2f", with.PerSec/without.PerSec)
		}
		cpu := func(u cpuUse) string {
			if u.DB < 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.1f + %.1f", u.DB, u.Bench)
		}
		w("| %d | %s | %s | %s | %s | %s | %.1f / %.1f | %s / %s | %d | %s / %s | %s |\n", n, wr, ws, or, osp, ratio,
			with.Seconds, without.Seconds, count(with.Batches), count(without.Batches), with.SegmentRows,
			cpu(with.CPU), cpu(without.CPU), yesNo(with.Verified && without.Verified))
	}
	w("\n\"Segments\" counts the segment task rows the run made. Without segments the hot partition is processed one batch at a time by whoever holds it, " +
		"so its items take as long whatever the number of workers; with them its segments are processed by every worker at once, and the run is bound by the batches in flight (the completion check reads `partition_progress` every 10 ms, in the database CPU too), the database's commits and this machine's two cores: " +
		"the database and the bench process (every distributor, in one process) share them, so the CPU columns against the seconds show how close a run came to them.\n\n")
	for _, x := range s.Runs {
		if x.Error != "" {
			w("- %d worker(s), segments %v failed: %s\n", x.Workers, x.Segments, oneLine(x.Error, 300))
		} else if x.Problem != "" {
			w("- %d worker(s), segments %v: not exactly once: %s\n", x.Workers, x.Segments, x.Problem)
		}
	}
	if s.Error != "" {
		w("The scenario failed: %s\n\n", oneLine(s.Error, 300))
	}
}

func maxWorkers(s *latencyResult) int {
	n := 0
	for _, x := range s.Runs {
		n = max(n, x.Workers)
	}
	return n
}
