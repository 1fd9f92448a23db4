package cliflags

import (
	"os"
	"path/filepath"
	"testing"
)

func TestInputFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tiers.csv")
	if err := os.WriteFile(file, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"":                             "",
		file:                           "",
		dir:                            "--tiers " + dir + " is a directory, want a CSV file",
		filepath.Join(dir, "none.csv"): "--tiers " + filepath.Join(dir, "none.csv") + ": no such file",
	} {
		err := InputFile("--tiers", path)
		if got := ""; err != nil {
			got = err.Error()
			if got != want {
				t.Errorf("InputFile(%q) = %q, want %q", path, got, want)
			}
		} else if want != "" {
			t.Errorf("InputFile(%q) = nil, want %q", path, want)
		}
	}
}
