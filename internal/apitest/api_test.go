// Package apitest keeps the list of baton's public API: every exported
// identifier of the public packages, with its signature, in api/public.txt
// at the top of the module, as the Go project keeps its api files. A
// change to the public surface fails TestPublicAPI until the list is
// regenerated (go test ./internal/apitest -update) and the difference is
// reviewed with the change.
package apitest

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite api/public.txt from the source")

// root is the module's top directory, relative to this package.
const root = "../.."

// listFile is the reviewed list.
var listFile = filepath.Join(root, "api", "public.txt")

// The public packages: every directory of the module with Go code, at any
// depth, but internal ones, commands, test data and the nested modules of
// tools, examples and tests. Names are slash-separated paths from the top
// ("pricing/ingest").
func publicPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == root {
			return nil
		}
		name := d.Name()
		if strings.HasPrefix(name, ".") || name == "internal" || name == "cmd" || name == "testdata" {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir // a module of its own
		}
		if files, _ := filepath.Glob(filepath.Join(path, "*.go")); len(files) > 0 {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pkgs = append(pkgs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func TestPublicAPI(t *testing.T) {
	var got []string
	for _, pkg := range publicPackages(t) {
		lines, err := exported(filepath.Join(root, pkg))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, lines...)
	}
	slices.Sort(got)
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.WriteFile(listFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(listFile)
	if err != nil {
		t.Fatalf("reading the reviewed API list: %v (go test ./internal/apitest -update writes it)", err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	added, removed := diff(got, want)
	if len(added)+len(removed) == 0 {
		return
	}
	var msg strings.Builder
	msg.WriteString("the public API differs from api/public.txt; if the change is meant, review it and run go test ./internal/apitest -update\n")
	for _, l := range added {
		fmt.Fprintf(&msg, "  + %s\n", l)
	}
	for _, l := range removed {
		fmt.Fprintf(&msg, "  - %s\n", l)
	}
	t.Error(msg.String())
}

// The list of a real package is not empty and names what it exports,
// methods and fields included, and nothing unexported: the lister itself
// works.
func TestExportedListsWhatIsExported(t *testing.T) {
	dir := t.TempDir()
	src := `package p

const A, b = 1, 2
var V int
type T struct {
	F int
	g int
	Embedded
}
type Embedded struct{}
type I interface{ M(x int) error; m() }
func New(s string) (*T, error) { return nil, nil }
func (t *T) Do(ctx any) {}
func (t *T) hidden() {}
func helper() {}
type hidden struct{ X int }
func (hidden) Exported() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nfunc TestX() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := exported(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	base := filepath.Base(dir)
	want := []string{
		"pkg " + base + ", const A",
		"pkg " + base + ", func New(s string) (*T, error)",
		"pkg " + base + ", method (*T) Do(ctx any)",
		"pkg " + base + ", type Embedded struct",
		"pkg " + base + ", type I interface",
		"pkg " + base + ", type I interface, M(x int) error",
		"pkg " + base + ", type T struct",
		"pkg " + base + ", type T struct, Embedded",
		"pkg " + base + ", type T struct, F int",
		"pkg " + base + ", var V int",
	}
	if !slices.Equal(got, want) {
		t.Errorf("exported(p) =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// exported lists the exported identifiers of the package in dir (its
// non-test files), one line each.
func exported(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	pkg := filepath.Base(dir)
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, "pkg "+pkg+", "+fmt.Sprintf(format, a...)) }
	str := func(n ast.Node) string {
		var b bytes.Buffer
		_ = printer.Fprint(&b, fset, n)
		return strings.Join(strings.Fields(b.String()), " ")
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				sig := strings.TrimPrefix(str(d.Type), "func")
				if d.Recv == nil {
					add("func %s%s", d.Name.Name, sig)
					continue
				}
				recv := str(d.Recv.List[0].Type)
				if !ast.IsExported(strings.TrimLeft(strings.SplitN(recv, "[", 2)[0], "*")) {
					continue
				}
				add("method (%s) %s%s", recv, d.Name.Name, sig)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						kind := "var"
						if d.Tok == token.CONST {
							kind = "const"
						}
						for _, n := range s.Names {
							if !n.IsExported() {
								continue
							}
							if s.Type != nil {
								add("%s %s %s", kind, n.Name, str(s.Type))
							} else {
								add("%s %s", kind, n.Name)
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						lines = append(lines, typeLines(pkg, s, str)...)
					}
				}
			}
		}
	}
	return lines, nil
}

// typeLines lists an exported type, its exported fields or methods.
func typeLines(pkg string, s *ast.TypeSpec, str func(ast.Node) string) []string {
	head := "pkg " + pkg + ", type " + s.Name.Name
	if s.TypeParams != nil {
		head += str(s.TypeParams)
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		head += " struct"
		lines := []string{head}
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 { // embedded
				name := strings.TrimLeft(str(f.Type), "*")
				if i := strings.LastIndex(name, "."); i >= 0 {
					name = name[i+1:]
				}
				if ast.IsExported(name) {
					lines = append(lines, head+", "+str(f.Type))
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					lines = append(lines, head+", "+n.Name+" "+str(f.Type))
				}
			}
		}
		return lines
	case *ast.InterfaceType:
		head += " interface"
		lines := []string{head}
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				lines = append(lines, head+", "+str(m.Type))
				continue
			}
			for _, n := range m.Names {
				if n.IsExported() {
					lines = append(lines, head+", "+n.Name+strings.TrimPrefix(str(m.Type), "func"))
				}
			}
		}
		return lines
	}
	sep := " "
	if s.Assign.IsValid() {
		sep = " = "
	}
	return []string{head + sep + str(s.Type)}
}

// diff returns the lines of got not in want and of want not in got.
func diff(got, want []string) (added, removed []string) {
	in := func(list []string) map[string]bool {
		m := make(map[string]bool, len(list))
		for _, l := range list {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	for _, l := range got {
		if !w[l] {
			added = append(added, l)
		}
	}
	for _, l := range want {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	return added, removed
}
