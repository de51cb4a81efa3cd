package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goNames is what the repository's Go code declares: per package name
// (the last element of its directory), its top-level names; per type
// name, its fields and methods; and every name declared anywhere
// (functions, methods, types, fields, constants, variables).
type goNames struct {
	pkgs    map[string]map[string]bool
	members map[string]map[string]bool
	all     map[string]bool
}

func declaredNames(t *testing.T, r string) goNames {
	t.Helper()
	n := goNames{pkgs: map[string]map[string]bool{}, members: map[string]map[string]bool{}, all: map[string]bool{}}
	fset := token.NewFileSet()
	for _, rel := range repoFiles(t, r, ".go") {
		f, err := parser.ParseFile(fset, filepath.Join(r, rel), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		pkg := path.Base(path.Dir(rel))
		if n.pkgs[pkg] == nil {
			n.pkgs[pkg] = map[string]bool{}
		}
		if strings.HasSuffix(rel, "_test.go") {
			// The design names test helpers (a test package's names are
			// its own): only as bare names.
			n.addFile(f, map[string]bool{})
			continue
		}
		n.addFile(f, n.pkgs[pkg])
	}
	// The dashboard's scripts name browser APIs (sessionStorage) the
	// pages may quote.
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	for _, rel := range repoFiles(t, r, ".js", ".html") {
		for _, w := range word.FindAllString(read(t, filepath.Join(r, rel)), -1) {
			n.all[w] = true
		}
	}
	return n
}

func (n *goNames) member(typ, name string) {
	if n.members[typ] == nil {
		n.members[typ] = map[string]bool{}
	}
	n.members[typ][name] = true
	n.all[name] = true
}

func (n *goNames) addFile(f *ast.File, top map[string]bool) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			n.all[d.Name.Name] = true
			if d.Recv == nil || len(d.Recv.List) == 0 {
				top[d.Name.Name] = true
				continue
			}
			n.member(recvType(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				n.addSpec(s, top)
			}
		}
	}
}

func (n *goNames) addSpec(s ast.Spec, top map[string]bool) {
	switch s := s.(type) {
	case *ast.TypeSpec:
		top[s.Name.Name], n.all[s.Name.Name] = true, true
		if n.members[s.Name.Name] == nil {
			n.members[s.Name.Name] = map[string]bool{}
		}
		if st, ok := s.Type.(*ast.StructType); ok {
			for _, fl := range st.Fields.List {
				for _, name := range fl.Names {
					n.member(s.Name.Name, name.Name)
				}
				if len(fl.Names) == 0 { // embedded: its name is the type's
					n.member(s.Name.Name, recvType(fl.Type))
				}
			}
		}
		if it, ok := s.Type.(*ast.InterfaceType); ok {
			for _, m := range it.Methods.List {
				for _, name := range m.Names {
					n.member(s.Name.Name, name.Name)
				}
			}
		}
	case *ast.ValueSpec:
		for _, name := range s.Names {
			top[name.Name], n.all[name.Name] = true, true
		}
	}
}

// recvType is the name of a receiver or embedded type (T, *T, T[X], pkg.T).
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// docsForCode are the pages that describe redrive's code: the design,
// docs/, and the processor's map of its files.
func docsForCode(t *testing.T, r string) []string {
	pages := []string{filepath.Join(r, "ARCHITECTURE.md"), filepath.Join(r, "processor", "doc.go")}
	for _, p := range mustGlob(t, filepath.Join(r, "docs", "*.md")) {
		pages = append(pages, p)
	}
	return pages
}

var (
	backticked = regexp.MustCompile("`([^`\n]+)`")
	goFileRef  = regexp.MustCompile(`(?:^|[\s(\x60|,;])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.go)\b`)
	// qualified: pkg.Name or pkg.Type.Member, or Type.Member.
	qualified = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(?:\(\))?$`)
	// lowerCamel: an unexported Go name such as newPipeline or admitTierLocked.
	lowerCamel = regexp.MustCompile(`^([a-z]+[A-Z][A-Za-z0-9]*)(?:\(\))?$`)
)

// Every Go file a page names exists: a path from the repository root, or a
// bare file name that some package has (pages name files the reader is
// told to open).
func TestGoFilesNamedInDocsExist(t *testing.T) {
	r := root(t)
	files := repoFiles(t, r, ".go")
	base := map[string]bool{}
	for _, f := range files {
		base[path.Base(f)] = true
	}
	for _, page := range docsForCode(t, r) {
		for i, line := range strings.Split(read(t, page), "\n") {
			for _, m := range goFileRef.FindAllStringSubmatch(line, -1) {
				ref := strings.TrimPrefix(m[1], "./")
				if strings.Contains(ref, "/") {
					if _, err := os.Stat(filepath.Join(r, ref)); err != nil && !slices.Contains(files, ref) {
						t.Errorf("%s:%d names %s, which does not exist", filepath.Base(page), i+1, ref)
					}
					continue
				}
				if !base[ref] {
					t.Errorf("%s:%d names %s: no package has that file", filepath.Base(page), i+1, ref)
				}
			}
		}
	}
}

// Every backticked Go name of redrive's a page uses is declared: pkg.Name
// (pkg one of redrive's packages, Name exported), Type.Member (Type one
// of redrive's types), and unexported camelCase names. Names of other
// modules (kgo.Record, http.Handler) and config keys (handler.callback.token)
// are not checked.
func TestGoNamesInDocsAreDeclared(t *testing.T) {
	r := root(t)
	n := declaredNames(t, r)
	for _, page := range docsForCode(t, r) {
		for i, line := range strings.Split(read(t, page), "\n") {
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				if why := n.unknown(m[1]); why != "" {
					t.Errorf("%s:%d: `%s`: %s", filepath.Base(page), i+1, m[1], why)
				}
			}
		}
	}
}

// unknown says why ref is not a declared name ("" when it is, or when ref
// is not checked).
func (n goNames) unknown(ref string) string {
	if m := qualified.FindStringSubmatch(ref); m != nil {
		first, second, third := m[1], m[2], m[3]
		if top, ok := n.pkgs[first]; ok && isExported(second) {
			if !top[second] {
				return "package " + first + " declares no " + second
			}
			if third != "" && !n.members[second][third] {
				return second + " has no field or method " + third
			}
			return ""
		}
		if mem, ok := n.members[first]; ok && third == "" && isExported(first) {
			if !mem[second] {
				return first + " has no field or method " + second
			}
		}
		return ""
	}
	if m := lowerCamel.FindStringSubmatch(ref); m != nil && !n.all[m[1]] {
		return "nothing in the repository declares " + m[1]
	}
	return ""
}

func isExported(s string) bool { return s != "" && s[0] >= 'A' && s[0] <= 'Z' }

// processor/doc.go names every file of the package: it is where a
// newcomer looks for "to change X, open Y".
func TestProcessorDocNamesEveryFile(t *testing.T) {
	r := root(t)
	doc := read(t, filepath.Join(r, "processor", "doc.go"))
	for _, f := range mustGlob(t, filepath.Join(r, "processor", "*.go")) {
		name := filepath.Base(f)
		if strings.HasSuffix(name, "_test.go") || name == "doc.go" {
			continue
		}
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `\b`).MatchString(doc) {
			t.Errorf("processor/doc.go does not say what %s holds", name)
		}
	}
}

// A Go file a comment names is there: a file of the same package, or a
// path from the repository root.
func TestGoFilesNamedInCommentsExist(t *testing.T) {
	r := root(t)
	fset := token.NewFileSet()
	ref := regexp.MustCompile(`(?:^|[\s(,;])((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_]+\.go)\b`)
	for _, rel := range repoFiles(t, r, ".go") {
		f, err := parser.ParseFile(fset, filepath.Join(r, rel), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		dir := path.Dir(rel)
		for _, cg := range f.Comments {
			for _, m := range ref.FindAllStringSubmatch(cg.Text(), -1) {
				name := m[1]
				if exists(filepath.Join(r, dir, name)) || (strings.Contains(name, "/") && exists(filepath.Join(r, name))) {
					continue
				}
				t.Errorf("%s:%d: a comment names %s, which is not there", rel, fset.Position(cg.Pos()).Line, name)
			}
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// The file map of ARCHITECTURE.md covers the tree: every Go file that
// ships (tests aside) is named in it, by path, by a name beside a path of
// the same row ("`processor/recreated.go`, `brokerlog.go`"), by a glob
// (`topics/*.go`) or by its directory (`deploy/`).
func TestFileMapCoversTheTree(t *testing.T) {
	r := root(t)
	arch := read(t, filepath.Join(r, "ARCHITECTURE.md"))
	i := strings.Index(arch, "## File map")
	if i < 0 {
		t.Fatal("ARCHITECTURE.md has no ## File map")
	}
	var entries []string
	for _, line := range strings.Split(arch[i:], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, " | ", 2)[0]
		dir := ""
		for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
			e := strings.Fields(m[1])[0]
			if strings.Contains(e, "/") {
				dir = path.Dir(strings.TrimSuffix(e, "/") + "/x")
				if !strings.HasSuffix(e, "/") {
					dir = path.Dir(e)
				}
			} else if dir != "" {
				e = dir + "/" + e
			}
			entries = append(entries, e)
		}
	}
	covered := func(f string) bool {
		for _, e := range entries {
			if e == f || (strings.HasSuffix(e, "/") && strings.HasPrefix(f, e)) {
				return true
			}
			if ok, _ := path.Match(e, f); ok {
				return true
			}
		}
		return false
	}
	for _, f := range repoFiles(t, r, ".go") {
		if strings.HasSuffix(f, "_test.go") || path.Base(f) == "doc.go" || covered(f) {
			continue
		}
		t.Errorf("ARCHITECTURE.md's file map does not name %s", f)
	}
}
