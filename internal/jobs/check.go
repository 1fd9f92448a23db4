package jobs

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/batonhq/baton/schedule"
)

// MinEvery is the shortest interval a job may run at: each run is a claim,
// a command started and a fenced completion, and slots closer than this
// would only pile up behind one another.
const MinEvery = time.Second

// Check refuses a definition "worker schedule add" cannot store or a
// pricing worker cannot run, in the words of its command line: what
// schedule.Definition.Validate refuses, with each field named as the flag
// or argument that sets it, then a definition with nothing to run or a
// built-in job this package does not know.
func Check(d schedule.Definition) error {
	if err := d.Validate(); err != nil {
		var msgs []string
		for _, e := range joined(err) {
			if fe, ok := errors.AsType[*schedule.FieldError](e); ok {
				msgs = append(msgs, fe.Format(flagName))
			} else {
				msgs = append(msgs, e.Error())
			}
		}
		return fmt.Errorf("schedule add %s: %s", d.Name, strings.Join(msgs, "; "))
	}
	switch {
	case len(d.Command) == 0 && d.Builtin == "":
		return fmt.Errorf("schedule add %s: give a command after -- or --builtin", d.Name)
	case d.Builtin != "" && d.Builtin != VerifyBuiltin:
		return fmt.Errorf("--builtin %q: no such built-in job (known: %s)", d.Builtin, VerifyBuiltin)
	}
	return nil
}

// flagName names a schedule.Definition field as schedule add takes it.
func flagName(field string) string {
	switch field {
	case "name":
		return "NAME"
	case "command":
		return "a command after --"
	}
	return "--" + field
}

// joined returns the errors errors.Join joined in err, or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
