package testcaddy

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
)

// adaptSeparator parts a case's Caddyfile from what it adapts to, as in
// Caddy's caddytest/integration/caddyfile_adapt.
const adaptSeparator = "----------"

// adaptCase is one *.caddyfiletest: a Caddyfile and what it must adapt
// to (JSON) or the text its error must contain.
type adaptCase struct {
	name, caddyfile, expected string
}

// adapts tells a case that must adapt from one that must fail.
func (c adaptCase) adapts() bool { return strings.HasPrefix(c.expected, "{") }

// readCases reads the *.caddyfiletest files of dir.
func readCases(t *testing.T, dir string) []adaptCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.caddyfiletest"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.caddyfiletest in %s (%v)", dir, err)
	}
	var cases []adaptCase
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		caddyfile, expected, _ := strings.Cut(string(data), adaptSeparator)
		cases = append(cases, adaptCase{filepath.Base(file), strings.TrimSpace(caddyfile) + "\n", strings.TrimSpace(expected)})
	}
	return cases
}

// AdaptCases runs every *.caddyfiletest in dir, in the manner of Caddy's
// own adapt tests: a Caddyfile, a line of ten dashes, then the JSON it
// must adapt to (compared line by line, tab-indented) or, for bad input,
// text the adapter's error must contain. A case without its expected part
// fails and prints what the Caddyfile adapts to, for review. It returns
// the Caddyfiles of the cases that adapt.
func AdaptCases(t *testing.T, dir string) (adapted []string) {
	t.Helper()
	for _, c := range readCases(t, dir) {
		caddyfile, expected, name := c.caddyfile, c.expected, c.name
		if c.adapts() {
			adapted = append(adapted, caddyfile)
		}
		t.Run(name, func(t *testing.T) {
			switch {
			case expected == "":
				out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
				var pretty bytes.Buffer
				_ = json.Indent(&pretty, out, "", "\t")
				t.Fatalf("no expected result after %s; the Caddyfile adapts to:\n%s\nerror: %v", adaptSeparator, pretty.String(), err)
			case strings.HasPrefix(expected, "{"):
				if !caddytest.CompareAdapt(t, name, caddyfile, "caddyfile", expected) {
					t.Errorf("%s does not adapt to the JSON expected", name)
				}
			default:
				_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
				if err == nil || !strings.Contains(err.Error(), expected) {
					t.Errorf("%s: want an error containing %q, got %v", name, expected, err)
				}
			}
		})
	}
	return adapted
}

// AssertEveryKeywordRefused fails for each keyword that no bad-input case
// of dir uses as the first word of a line with an expected error naming
// it ('keyword'): options a parser refuses need a golden case too, which
// pins the reason given.
func AssertEveryKeywordRefused(t *testing.T, dir string, keywords []string) {
	t.Helper()
	cases := readCases(t, dir)
	for _, k := range keywords {
		line := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(k) + `(\s|$)`)
		if !slices.ContainsFunc(cases, func(c adaptCase) bool {
			return !c.adapts() && line.MatchString(c.caddyfile) && strings.Contains(c.expected, "'"+k+"'")
		}) {
			t.Errorf("no golden bad-input case refuses %q", k)
		}
	}
}

// CaddyfileKeywords are the option names the Caddyfile parsers of the
// package in dir accept: in its functions that take a caddyfile.Dispenser
// (or an httpcaddyfile.Helper), the string cases of switches and the
// strings compared with a token's value (d.Val() == "share").
func CaddyfileKeywords(t *testing.T, dir string) []string {
	t.Helper()
	return CaddyfileKeywordsOf(t, dir)
}

// CaddyfileKeywordsOf is CaddyfileKeywords for the named functions only
// ("Recv.Method" or "Func"; all of them when none is named): the options
// of a parser one package shares with another.
func CaddyfileKeywordsOf(t *testing.T, dir string, funcs ...string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	add := func(e ast.Expr) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	isVal := func(e ast.Expr) bool {
		call, ok := e.(*ast.CallExpr)
		if !ok {
			return false
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "Val"
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range src.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !readsCaddyfile(fn) || (len(funcs) > 0 && !slices.Contains(funcs, funcName(fn))) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CaseClause:
					for _, e := range n.List {
						add(e)
					}
				case *ast.BinaryExpr:
					if (n.Op == token.EQL || n.Op == token.NEQ) && (isVal(n.X) || isVal(n.Y)) {
						add(n.X)
						add(n.Y)
					}
				}
				return true
			})
		}
	}
	return out
}

// funcName is "Recv.Method" for a method, else the function's name.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// readsCaddyfile tells whether fn takes Caddyfile tokens.
func readsCaddyfile(fn *ast.FuncDecl) bool {
	for _, p := range fn.Type.Params.List {
		typ := p.Type
		if star, ok := typ.(*ast.StarExpr); ok {
			typ = star.X
		}
		if sel, ok := typ.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Dispenser" || sel.Sel.Name == "Helper") {
			return true
		}
	}
	return false
}

// AssertEveryKeywordAdapted fails for each keyword no adapted Caddyfile
// uses as the first word of a line: every directive and option needs a
// golden adapt case.
func AssertEveryKeywordAdapted(t *testing.T, keywords, adapted []string) {
	t.Helper()
	all := strings.Join(adapted, "\n")
	for _, k := range keywords {
		if !regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(k) + `(\s|$)`).MatchString(all) {
			t.Errorf("no golden adapt case uses %q", k)
		}
	}
}
