// Package exampletest builds and runs the programs of the examples module
// (a Go module of its own, as an embedding service would be) against a
// throwaway database, and checks that they use only baton's public
// packages.
package exampletest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const examples = "../../examples"

// The embedding example migrates baton's core schema into a database of
// its own, enqueues orders in its own transactions, ships them with its own
// processor and exits once everything is shipped.
func TestEmbedExample(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "embed")
	build := exec.Command("go", "build", "-o", bin, "./embed")
	build.Dir = examples
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the example module: %v\n%s", err, out)
	}
	run := exec.Command(bin)
	run.Env = append(os.Environ(), "DATABASE_URL="+pgtest.NewEmptyURL(t))
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("running the example: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	want := `acme: 3 orders shipped, 1700 cents
globex: 1 orders shipped, 700 cents
initech: 2 orders shipped, 1400 cents
carrier requests: 3 distinct
`
	if stdout.String() != want {
		t.Errorf("example output:\n%s\nwant:\n%s\nstderr:\n%s", stdout.String(), want, stderr.String())
	}
}

// No program in the examples module imports an internal package of baton's:
// it compiles the way a service outside this repository would.
func TestExamplesImportOnlyPublicPackages(t *testing.T) {
	t.Parallel()
	// Their own imports: baton's public packages import its internal
	// ones, which is how internal packages are meant to be used.
	list := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "./...")
	list.Dir = examples
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("listing the examples' dependencies: %v\n%s", err, out)
	}
	var baton int
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/batonhq/baton/") {
			continue
		}
		baton++
		if strings.Contains(p, "/internal/") || strings.HasSuffix(p, "/internal") {
			t.Errorf("the examples depend on %s", p)
		}
	}
	if baton == 0 {
		t.Fatal("the examples import nothing of baton's")
	}
}
