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
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
)

// adaptSeparator parts a case's Caddyfile from what it adapts to, as in
// Caddy's caddytest/integration/caddyfile_adapt.
const adaptSeparator = "----------"

// AdaptCases runs every *.caddyfiletest in dir, in the manner of Caddy's
// own adapt tests: a Caddyfile, a line of ten dashes, then the JSON it
// must adapt to (compared line by line, tab-indented) or, for bad input,
// text the adapter's error must contain. A case without its expected part
// fails and prints what the Caddyfile adapts to, for review. It returns
// the Caddyfiles of the cases that adapt.
func AdaptCases(t *testing.T, dir string) (adapted []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.caddyfiletest"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no *.caddyfiletest in %s (%v)", dir, err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		caddyfile, expected, _ := strings.Cut(string(data), adaptSeparator)
		caddyfile, expected = strings.TrimSpace(caddyfile)+"\n", strings.TrimSpace(expected)
		name := filepath.Base(file)
		if strings.HasPrefix(expected, "{") {
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

// CaddyfileKeywords are the option names a package's Caddyfile parsers
// accept: the string cases of the switches in its functions whose names
// start with parse or contain nmarshal, in the given source files.
func CaddyfileKeywords(t *testing.T, files ...string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		src, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range src.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !(strings.HasPrefix(fn.Name.Name, "parse") || strings.Contains(fn.Name.Name, "nmarshal")) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				cc, ok := n.(*ast.CaseClause)
				if !ok {
					return true
				}
				for _, e := range cc.List {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil && !seen[s] {
							seen[s] = true
							out = append(out, s)
						}
					}
				}
				return true
			})
		}
	}
	return out
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
