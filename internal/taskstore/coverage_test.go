package taskstore_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/batonhq/baton/internal/taskstore"
	"github.com/batonhq/baton/partition"
)

// notStatements are Store methods production calls that configure the
// store or keep its history rather than run the protocol's statements:
// the conformance suite leaves them out (the model has no history).
var notStatements = map[string]string{
	"Kind":             "selects the kind",
	"WithDB":           "selects the connection",
	"InTx":             "selects the transaction (Txn's statements are Store's of the same names)",
	"PrepareWhen":      "selects prepared statements",
	"WithoutEvents":    "turns history off",
	"Record":           "history row",
	"RecordFirstBatch": "history row",
	"PruneEvents":      "history retention",
	"Admin":            "the producers' and operators' Store over the same rows",
	"LowerFloor":       "moves where the store's next read of claimable rows starts; runs nothing",
	"FloorPolicy":      "sets the claim floor's margin, full-read period and clock; runs nothing",
	"Notify":           "wakes the kind's workers; reads and writes no row",
}

// operatorStatements are Store methods the suite exercises that the
// workers do not call: the operator's (cmd/worker retry, the console)
// and a processor's owner's (Rewind, pricing's re-rating), and pauses.
var operatorStatements = map[string]bool{"Retry": true, "Rewind": true, "RewindTx": true, "Pause": true, "Resume": true}

// storeCalls lists the methods of *taskstore.Store called in the non-test
// Go files of dir on an expression that names a store (its text contains
// "store").
func storeCalls(t *testing.T, dir string, methods map[string]bool) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !methods[sel.Sel.Name] {
				return true
			}
			recv := string(src[fset.Position(sel.X.Pos()).Offset:fset.Position(sel.X.End()).Offset])
			if r := strings.ToLower(recv); strings.Contains(r, "store") || strings.Contains(r, "admin") {
				out[sel.Sel.Name] = true
			}
			return true
		})
	}
	return out
}

func sortedNames(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The conformance suite runs exactly the statements production runs: a
// Store method the workers (packages distributor, heartbeat, leader,
// schedule, lock) call that the suite's PostgreSQL harness does not, or
// one the harness calls that no worker does, fails this test.
func TestSuiteCoversProduction(t *testing.T) {
	methods := map[string]bool{}
	for _, st := range []reflect.Type{reflect.TypeOf(&taskstore.Store{}), reflect.TypeOf(&partition.Store{})} {
		for i := range st.NumMethod() {
			methods[st.Method(i).Name] = true
		}
	}
	prod := map[string]bool{}
	for _, dir := range []string{"../../distributor", "../../heartbeat", "../../leader", "../../schedule", "../../lock"} {
		for m := range storeCalls(t, dir, methods) {
			prod[m] = true
		}
	}
	if !prod["HeartbeatBelow"] || !prod["FairShareLoad"] {
		t.Fatalf("found production calls %v: the scan misses the distributor's statements", sortedNames(prod))
	}
	// The suite's calls: those of its PostgreSQL harness.
	suite := map[string]bool{}
	src, err := os.ReadFile("conformance_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for m := range methods {
		for _, recv := range []string{"h.s.", "b.s.", "g.s.", "h.s.Admin()."} {
			if strings.Contains(string(src), recv+m+"(") {
				suite[m] = true
			}
		}
	}
	var missing, extra []string
	for m := range prod {
		if _, skip := notStatements[m]; !skip && !suite[m] {
			missing = append(missing, m)
		}
	}
	for m := range suite {
		if _, skip := notStatements[m]; !skip && !prod[m] && !operatorStatements[m] {
			extra = append(extra, m)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("production runs Store statements the conformance suite does not: %v (add them to internal/storetest and both harnesses)", missing)
	}
	if len(extra) > 0 {
		t.Errorf("the conformance suite runs Store statements no worker does: %v (test what runs)", extra)
	}
	t.Logf("production statements: %v", sortedNames(prod))
}
