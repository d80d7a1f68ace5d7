package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// flagInMessage is a flag as a message names it: "--max-sessions".
var flagInMessage = regexp.MustCompile(`--([a-z][a-z0-9-]+)`)

// Every flag that a message of the libraries names exists: a user told to
// "raise --network" must find --network in `bridge --help`. The libraries
// are parsed, and only their string literals are searched, so a comment
// quoting another program's flag ("docker run --entrypoint") is no message.
func TestEveryFlagNamedInAMessageExists(t *testing.T) {
	fs := newFlagSet(defaultConfig())
	fset := token.NewFileSet()
	for _, pkg := range []string{"bridge", "session", "sandbox", "peer", "jsonrpc", "affinity"} {
		dir := filepath.Join("..", "..", pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		literals := 0
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				literals++
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Errorf("%s: %v", fset.Position(lit.Pos()), err)
					return true
				}
				for _, m := range flagInMessage.FindAllStringSubmatch(s, -1) {
					if fs.Lookup(m[1]) == nil {
						t.Errorf("%s: a message names --%s, which is not a flag of bridge --help", fset.Position(lit.Pos()), m[1])
					}
				}
				return true
			})
		}
		if literals == 0 {
			t.Errorf("package %s: no string literal found; is the path right?", pkg)
		}
	}
}
