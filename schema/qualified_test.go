package schema_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// unqualified matches a statement naming one of baton's tables without a
// schema: it would read or write whatever table of that name the session's
// search_path finds first, a host's included.
var unqualified = regexp.MustCompile(`\b(FROM|JOIN|INTO|UPDATE|TABLE|EXISTS|TRUNCATE|ANALYZE)\s+(tasks|workers|records|record_chunks|priced|contracts|tiers|loads|events|jobs|leaderships|entity_locks)\b[^.(\w]`)

// Every statement of baton's code and migrations names baton's tables
// through the schema placeholder ({{.Schema}}.tasks), so that a host's own
// tables of the same names are never touched. Tests may name the default
// schema directly (baton.tasks); the examples are a host's code.
func TestStatementsQualifyBatonsTables(t *testing.T) {
	t.Parallel()
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "examples", "testdata", filepath.Join("schema", "testdata"), filepath.Join("bench", "results"):
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".sql")) {
			return nil
		}
		if rel == filepath.Join("bench", "stmts.go") { // matches statement texts, does not run them
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "//") || strings.HasPrefix(trimmed, "--") {
				continue
			}
			if m := unqualified.FindString(line + " "); m != "" {
				t.Errorf("%s:%d: %q names a table of baton's without its schema: write {{.Schema}}.%s and pass the statement through schema.SQL",
					rel, i+1, strings.TrimSpace(m), unqualified.FindStringSubmatch(line + " ")[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
