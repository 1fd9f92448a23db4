// Package doccheck keeps the Go code shown in the documentation compiled:
// every ```go block of README.md and docs/*.md is preceded by a comment
// naming where it comes from,
//
//	<!-- code: examples/embed/main.go#placeOrders -->
//
// a function or method (Type.Method) of that file, or a region of it
// between the lines "// docs:NAME" and "// docs:end". The file is a
// program, example or test that the build compiles (and, for examples
// with an Output comment, runs), so a snippet that would not compile
// cannot reach the docs. TestDocSnippets fails when a block differs from
// its source or names none; go test ./internal/doccheck -update rewrites
// the blocks from their sources.
package doccheck

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the documentation's Go blocks from their sources")

const root = "../.."

var marker = regexp.MustCompile(`^<!-- code: ([^#\s]+)#(\S+) -->$`)

func TestDocSnippets(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	blocks := 0
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		changed := false
		for i := 0; i < len(lines); i++ {
			if lines[i] != "```go" {
				continue
			}
			blocks++
			end := i + 1
			for end < len(lines) && lines[end] != "```" {
				end++
			}
			rel, _ := filepath.Rel(root, page)
			where := fmt.Sprintf("%s:%d", rel, i+1)
			var m []string
			if i > 0 {
				m = marker.FindStringSubmatch(lines[i-1])
			}
			if m == nil {
				t.Errorf("%s: a Go block without a <!-- code: FILE#NAME --> line before it: show code the build compiles", where)
				i = end
				continue
			}
			want, err := extract(filepath.Join(root, m[1]), m[2])
			if err != nil {
				t.Errorf("%s: %v", where, err)
				i = end
				continue
			}
			got := strings.Join(lines[i+1:end], "\n")
			if got != want {
				if *update {
					lines = append(lines[:i+1], append(strings.Split(want, "\n"), lines[end:]...)...)
					end = i + 1 + strings.Count(want, "\n") + 1
					changed = true
				} else {
					t.Errorf("%s: the block differs from %s#%s (go test ./internal/doccheck -update rewrites it):\n--- docs\n%s\n--- source\n%s", where, m[1], m[2], got, want)
				}
			}
			i = end
		}
		if changed {
			if err := os.WriteFile(page, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no Go block found in the documentation: the check checked nothing")
	}
}

// extract returns the source of name in file: a region marked with
// "// docs:name" … "// docs:end", or a function or method declaration
// (Type.Method), de-indented.
func extract(file, name string) (string, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the snippet's source: %w", err)
	}
	if text, ok := region(src, name); ok {
		return dedent(text), nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return "", fmt.Errorf("parsing %s: %w", file, err)
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || declName(fd) != name {
			continue
		}
		return string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset]), nil
	}
	return "", fmt.Errorf("%s has no function %s nor a region // docs:%s", file, name, name)
}

func declName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

func region(src []byte, name string) (string, bool) {
	var out []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case trimmed == "// docs:"+name:
			in = true
		case in && trimmed == "// docs:end":
			return strings.Join(out, "\n"), true
		case in:
			out = append(out, l)
		}
	}
	return "", false
}

// dedent removes the tabs every non-empty line starts with.
func dedent(text string) string {
	lines := strings.Split(text, "\n")
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(bytes.TrimLeft([]byte(l), "\t"))
		if common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	return strings.Join(lines, "\n")
}
