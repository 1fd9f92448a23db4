package demo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/batonhq/baton/partition"
)

// JobRun is one line a demo or test job appends: its slot and worker.
type JobRun struct {
	Slot   time.Time
	Worker string // worker name, without the instance suffix
}

// ReadJobLog reads the lines "SLOT WORKER" a job appended to path (none if
// there is no such file).
func ReadJobLog(path string) ([]JobRun, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []JobRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 2 {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		slot, err := time.Parse(time.RFC3339Nano, fs[0])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, JobRun{slot.UTC(), partition.InstanceName(fs[1])})
	}
	return out, sc.Err()
}

// SlotCheck is what CheckSlotRuns found.
type SlotCheck struct {
	Slots, Repeated int
	First, Last     time.Time
	Problems        []string
}

// CheckSlotRuns checks a 1-second job's runs: every slot from the first to
// the last ran, and a slot ran again only after a run by a victim or one
// its worker reported lost (lost: the job's runs from Lost.Runs).
func CheckSlotRuns(runs []JobRun, victims map[string]bool, lost map[JobRun]bool) SlotCheck {
	var c SlotCheck
	seen := map[time.Time]string{}
	for _, r := range runs {
		if prev, ok := seen[r.Slot]; ok {
			c.Repeated++
			if !victims[prev] && !lost[JobRun{r.Slot.UTC(), prev}] {
				c.Problems = append(c.Problems, fmt.Sprintf("slot %s ran twice: by %s (neither killed nor stopped, and it did not report the run lost), then %s",
					r.Slot.Format(time.RFC3339), prev, r.Worker))
			}
		}
		seen[r.Slot] = r.Worker
		if c.First.IsZero() || r.Slot.Before(c.First) {
			c.First = r.Slot
		}
		if r.Slot.After(c.Last) {
			c.Last = r.Slot
		}
	}
	c.Slots = len(seen)
	if len(seen) == 0 {
		c.Problems = append(c.Problems, "no slot ran")
		return c
	}
	var missing []string
	for s := c.First; !s.After(c.Last); s = s.Add(time.Second) {
		if _, ok := seen[s]; !ok {
			missing = append(missing, s.Format(time.TimeOnly))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		c.Problems = append(c.Problems, "slots never ran: "+strings.Join(missing, ", "))
	}
	return c
}

// LeaderCheck is what CheckLeaderRuns found.
type LeaderCheck struct {
	Changes  []string
	Problems []string
}

// CheckLeaderRuns checks a leader-mode job's runs: the worker changes only
// after a victim's run or a run of a worker that reported losing the job
// (lost: the job's workers from Lost.Workers).
func CheckLeaderRuns(runs []JobRun, victims, lost map[string]bool) LeaderCheck {
	var c LeaderCheck
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1].Worker, runs[i].Worker
		if prev == cur {
			continue
		}
		c.Changes = append(c.Changes, prev+" → "+cur)
		if !victims[prev] && !lost[prev] {
			c.Problems = append(c.Problems, fmt.Sprintf("leader job moved from %s to %s at %s although %s was alive and did not report losing it",
				prev, cur, runs[i].Slot.Format(time.RFC3339), prev))
		}
	}
	return c
}
