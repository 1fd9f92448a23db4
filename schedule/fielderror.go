package schedule

import "strings"

// FieldError is one of Definition.Validate's errors: what is wrong with
// one field of a definition, or with several together. Fields are named
// as the command line spells their flags ("every", "lock-at-most-for"),
// so that a command line can name its own flags with Format.
type FieldError struct {
	// Job is the definition's name.
	Job string
	// Fields are the fields at fault: name, every, cron, mode, missed,
	// lock-at-most-for, lock-at-least-for, command or builtin.
	Fields []string
	// Value is the value at fault as the user would write it (quoted if
	// a string); empty when the problem is with several fields.
	Value string
	// Problem says what is wrong, without naming the fields.
	Problem string
}

func (e *FieldError) Error() string {
	return "job " + e.Job + ": " + e.Format(func(field string) string { return field })
}

// Format says what is wrong, naming each field by name(field).
func (e *FieldError) Format(name func(field string) string) string {
	names := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		names[i] = name(f)
	}
	what := strings.Join(names, " and ")
	if e.Value != "" {
		what += " " + e.Value
	}
	return what + ": " + e.Problem
}
