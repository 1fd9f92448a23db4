package schedule

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// Mode says what happens to a job's lease between runs.
type Mode string

// Modes.
const (
	// ModeLock releases the job after each run, so the next slot can go to
	// any worker.
	ModeLock Mode = "lock"
	// ModeExpire does not release the job: the lease is no longer renewed
	// after the run and simply runs out, so no worker starts the job again
	// before it has.
	ModeExpire Mode = "expire"
	// ModeLeader keeps the job (its lease renewed) between runs: the same
	// worker runs every slot while it lives.
	ModeLeader Mode = "leader"
)

// Missed is the policy for slots that passed while no run could start.
type Missed string

// Missed-slot policies.
const (
	// MissedSkip runs the latest due slot once and skips the earlier ones.
	MissedSkip Missed = "skip"
	// MissedCatchUp runs every missed slot once, in order.
	MissedCatchUp Missed = "catch-up"
)

// LockAtMostForDefault is the longest a run may hold its job unless the
// definition says otherwise.
const LockAtMostForDefault = time.Hour

var nameFormat = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// Definition is a job as stored: its schedule and policies, and what runs
// (a command, a built-in, or a function registered in code).
type Definition struct {
	Name string
	// Every is a fixed interval; slots are its multiples since the Unix
	// epoch, so every worker computes the same ones. Exactly one of Every
	// and Cron is set.
	Every time.Duration
	// Cron is a five-field cron expression (or a descriptor such as
	// @hourly), evaluated in UTC.
	Cron string
	// Mode defaults to ModeLock.
	Mode Mode
	// Missed defaults to MissedSkip.
	Missed Missed
	// LockAtMostFor is the longest a run may hold the job: the run is
	// cancelled when it is reached, and its lease is no longer renewed, so
	// another worker can take the job over. Defaults to
	// LockAtMostForDefault.
	LockAtMostFor time.Duration
	// LockAtLeastFor is the shortest time between two runs' starts, on the
	// database clock.
	LockAtLeastFor time.Duration
	// Command, if set, is the argv of an external command to run.
	Command []string
	// Builtin, if set, names a built-in job.
	Builtin string
}

func (d *Definition) setDefaults() {
	if d.Mode == "" {
		d.Mode = ModeLock
	}
	if d.Missed == "" {
		d.Missed = MissedSkip
	}
	if d.LockAtMostFor == 0 {
		d.LockAtMostFor = LockAtMostForDefault
	}
}

// Validate reports what is wrong with d (after defaults): a
// *FieldError for each problem, joined.
func (d Definition) Validate() error {
	d.setDefaults()
	var errs []error
	wrong := func(field, value, problem string) {
		errs = append(errs, &FieldError{Job: d.Name, Fields: []string{field}, Value: value, Problem: problem})
	}
	exclusive := func(problem string, fields ...string) {
		errs = append(errs, &FieldError{Job: d.Name, Fields: fields, Problem: problem})
	}
	if !nameFormat.MatchString(d.Name) {
		wrong("name", strconv.Quote(d.Name), "want 1-64 of letters, digits, '.', '_', ':' or '-'")
	}
	switch {
	case d.Every != 0 && d.Cron != "":
		exclusive("give one, not both", "every", "cron")
	case d.Every == 0 && d.Cron == "":
		exclusive("give one (an interval or a cron expression)", "every", "cron")
	case d.Every < 0 || (d.Every > 0 && d.Every%time.Microsecond != 0):
		wrong("every", d.Every.String(), "want a positive whole number of microseconds")
	case d.Cron != "":
		if _, err := parseCron(d.Cron); err != nil {
			wrong("cron", strconv.Quote(d.Cron), err.Error())
		}
	}
	switch d.Mode {
	case ModeLock, ModeExpire, ModeLeader:
	default:
		wrong("mode", strconv.Quote(string(d.Mode)), fmt.Sprintf("want %s, %s or %s", ModeLock, ModeExpire, ModeLeader))
	}
	switch d.Missed {
	case MissedSkip, MissedCatchUp:
	default:
		wrong("missed", strconv.Quote(string(d.Missed)), fmt.Sprintf("want %s or %s", MissedSkip, MissedCatchUp))
	}
	if d.LockAtMostFor < time.Millisecond {
		wrong("lock-at-most-for", d.LockAtMostFor.String(), "want at least 1ms")
	}
	if d.LockAtLeastFor < 0 {
		wrong("lock-at-least-for", d.LockAtLeastFor.String(), "must not be negative")
	}
	if len(d.Command) > 0 && d.Builtin != "" {
		exclusive("give one, not both", "command", "builtin")
	}
	return errors.Join(errs...)
}

// ScheduleString renders the schedule as the CLI takes it.
func (d Definition) ScheduleString() string {
	if d.Cron != "" {
		return "cron " + d.Cron
	}
	return "every " + d.Every.String()
}

// slots returns d's schedule.
func (d Definition) slots() (slotSchedule, error) {
	if d.Cron != "" {
		c, err := parseCron(d.Cron)
		if err != nil {
			return nil, fmt.Errorf("job %s: cron %q: %w", d.Name, d.Cron, err)
		}
		return cronSlots{c}, nil
	}
	if d.Every <= 0 {
		return nil, fmt.Errorf("job %s: no schedule", d.Name)
	}
	return everySlots(d.Every.Microseconds()), nil
}

func parseCron(expr string) (cron.Schedule, error) {
	return cron.ParseStandard(expr)
}

// slotSchedule computes due times. All times given to it come from the
// database clock.
type slotSchedule interface {
	// Next returns the first slot strictly after t.
	Next(t time.Time) time.Time
}

// everySlots are the multiples of an interval (microseconds) since the
// Unix epoch.
type everySlots int64

func (e everySlots) Next(t time.Time) time.Time {
	us := t.UnixMicro()
	d := int64(e)
	n := us / d
	if us < 0 && us%d != 0 {
		n--
	}
	return time.UnixMicro((n + 1) * d).UTC()
}

type cronSlots struct{ s cron.Schedule }

func (c cronSlots) Next(t time.Time) time.Time { return c.s.Next(t.UTC()).UTC() }

// latestDue returns the latest slot at or before now, starting from the
// due slot from (from <= now).
func latestDue(s slotSchedule, from, now time.Time) time.Time {
	if e, ok := s.(everySlots); ok {
		// Arithmetic: the multiple of the interval at or before now.
		d := int64(e)
		us := now.UnixMicro()
		n := us / d
		if us < 0 && us%d != 0 {
			n--
		}
		if l := time.UnixMicro(n * d).UTC(); l.After(from) {
			return l
		}
		return from
	}
	slot := from
	for {
		n := s.Next(slot)
		if n.After(now) || n.IsZero() {
			return slot
		}
		slot = n
	}
}

// RunFunc is a job's body. ctx is cancelled when the run loses its lease,
// reaches LockAtMostFor or the worker stops.
type RunFunc func(ctx context.Context, r *Run) error

// Job is a definition with the function that runs it, for registration in
// code.
type Job struct {
	Definition
	Run RunFunc
}
