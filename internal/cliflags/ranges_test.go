package cliflags

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// Only the annotated flags given on the command line are checked, each
// against its own range, and the error names the flag.
func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string // "" for no error
	}{
		{nil, ""},
		{[]string{"--pos", "1", "--nonneg", "0", "--min", "2s", "--any", "-5"}, ""},
		{[]string{"--pos", "0"}, "--pos must be greater than zero, got 0"},
		{[]string{"--nonneg", "-1"}, "--nonneg must not be negative, got -1"},
		{[]string{"--min", "1500ms"}, "--min must be at least 2s, got 1.5s"},
	} {
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		f := cmd.Flags()
		f.Int("pos", 3, "")
		f.Int("nonneg", 3, "")
		f.Duration("min", 0, "") // a default below the minimum: defaults are not checked
		f.Int("any", 0, "")
		Positive(f, "pos")
		NonNegative(f, "nonneg")
		AtLeast(f, "min", "2s")
		AnyValue(f, "any")
		if err := f.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		err := Check(cmd)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
		for _, name := range []string{"pos", "nonneg", "min", "any"} {
			if !Annotated(f.Lookup(name)) {
				t.Errorf("--%s not annotated", name)
			}
		}
	}
}
