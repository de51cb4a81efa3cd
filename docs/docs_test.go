package docs

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// root is the repository root (tests run in docs/).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("no go.mod in %s: %v", r, err)
	}
	return r
}

// repoFiles lists the repository's files (relative, slash-separated) whose
// names end in one of exts; .git and build output are skipped.
func repoFiles(t *testing.T, r string, exts ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".dev":
				return filepath.SkipDir
			}
			return nil
		}
		for _, e := range exts {
			if strings.HasSuffix(d.Name(), e) {
				rel, _ := filepath.Rel(r, p)
				out = append(out, filepath.ToSlash(rel))
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The contract lives in the repository: nothing may send a reader to a
// folder beside the clone, or to the design notes that were kept there
// before docs/ existed (the design and the Kafka notes). The strings are split
// so that this file does not contain them.
func TestNothingPointsOutsideTheRepository(t *testing.T) {
	r := root(t)
	banned := []string{".." + "/shared", "design" + ".md", "kafka-notes" + ".md"}
	files := repoFiles(t, r, ".md", ".go")
	if len(files) < 20 {
		t.Fatalf("found only %d .md/.go files under %s: the walk is broken", len(files), r)
	}
	for _, f := range files {
		for i, line := range strings.Split(read(t, filepath.Join(r, f)), "\n") {
			for _, bad := range banned {
				if strings.Contains(line, bad) {
					t.Errorf("%s:%d refers to %s, outside the repository: %s", f, i+1, bad, strings.TrimSpace(line))
				}
			}
		}
	}
}

var (
	linkRE       = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	codeSpanRE   = regexp.MustCompile("`[^`\n]*`")
	headingRE    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// mdLinks returns the link targets of a markdown text with their line
// numbers, outside fenced code blocks and code spans.
func mdLinks(text string) (targets []string, lines []int) {
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = codeSpanRE.ReplaceAllString(line, "")
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			targets = append(targets, strings.Trim(m[1], "<>"))
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// slug is the anchor GitHub gives a heading: lower case, punctuation but
// '-' and '_' dropped, spaces as '-'.
func slug(heading string) string {
	heading = strings.ReplaceAll(heading, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the anchors of a markdown file: its headings' slugs (with
// GitHub's -1, -2 suffixes for repeats) and explicit <a name|id>.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Every relative link in every markdown file leads to a file of the
// repository; a #fragment into docs/ names a heading that exists there.
func TestRelativeLinksResolve(t *testing.T) {
	r := root(t)
	files := repoFiles(t, r, ".md")
	checked := 0
	for _, f := range files {
		text := read(t, filepath.Join(r, f))
		targets, lines := mdLinks(text)
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := filepath.Join(r, filepath.FromSlash(f)) // the file itself for "#x"
			if path != "" {
				dest = filepath.Join(filepath.Dir(filepath.Join(r, f)), filepath.FromSlash(path))
			}
			rel, err := filepath.Rel(r, dest)
			if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				t.Errorf("%s:%d: link %q leaves the repository", f, lines[i], target)
				continue
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", f, lines[i], target, filepath.ToSlash(rel))
				continue
			}
			checked++
			rel = filepath.ToSlash(rel)
			if frag == "" || !strings.HasPrefix(rel, "docs/") || !strings.HasSuffix(rel, ".md") {
				continue
			}
			if !anchors(read(t, dest))[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", f, lines[i], target, rel, frag)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links checked: the link parser is broken", checked)
	}
}

func TestAnchorSlugs(t *testing.T) {
	for in, want := range map[string]string{
		"Which tier":                          "which-tier",
		"`analyzer.rules[]`":                  "analyzerrules",
		"Polling: 202 and `Redrive-State`":    "polling-202-and-redrive-state",
		"`redrive dlq stats` / `export`":      "redrive-dlq-stats--export",
		"Kafka client pitfalls, numbered (1)": "kafka-client-pitfalls-numbered-1",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every docs/*.md is reachable from the index.
func TestIndexListsEveryPage(t *testing.T) {
	index := read(t, "README.md")
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if p != "README.md" && !strings.Contains(index, "]("+p+")") {
			t.Errorf("docs/README.md does not link %s", p)
		}
	}
}

// optionalRE finds the "#~ " of the example's optional settings.
var optionalRE = regexp.MustCompile(`(?m)^(\s*)#~ ?`)

// freeForm are mapping keys whose children are user data (header names,
// error codes, query and form fields), not configuration keys.
var freeForm = map[string]bool{"headers": true, "min_delay": true, "pause": true, "query": true, "form": true}

// configPaths walks a YAML node and collects every key path: "a.b" for
// mappings, "a[].b" for the keys of a list's items.
func configPaths(n *yaml.Node, prefix string, out map[string]bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			configPaths(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			if !freeForm[k] {
				configPaths(n.Content[i+1], p, out)
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			configPaths(c, prefix+"[]", out)
		}
	}
}

// Every key of redrive.example.yaml, the optional "#~" ones included, is
// documented in docs/configuration.md by its full path in backticks.
func TestEveryConfigKeyIsDocumented(t *testing.T) {
	r := root(t)
	example := read(t, filepath.Join(r, "redrive.example.yaml"))
	doc := read(t, "configuration.md")
	paths := map[string]bool{}
	for name, text := range map[string]string{
		"as shipped":                    example,
		"with the #~ lines uncommented": optionalRE.ReplaceAllString(example, "$1"),
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(text), &n); err != nil {
			t.Fatalf("redrive.example.yaml %s: %v", name, err)
		}
		configPaths(&n, "", paths)
	}
	// Keys that must be among them, so that a broken walk cannot pass.
	for _, p := range []string{"brokers", "pipelines[].retry.tiers", "pipelines[].handler.http.json.ok_value", "tls.server_name", "analyzer.rules[].max_redrives", "analyzer.alerts[].match.classes"} {
		if !paths[p] {
			t.Errorf("the walk of redrive.example.yaml did not find %s", p)
		}
	}
	sorted := slices.Sorted(func(yield func(string) bool) {
		for p := range paths {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range sorted {
		if !strings.Contains(doc, "`"+p+"`") {
			t.Errorf("docs/configuration.md does not document `%s` (a key of redrive.example.yaml)", p)
		}
	}
}

// goFiles parses the non-test Go files of dir (relative to the repository
// root r).
func goFiles(t *testing.T, r, dir string) []*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	var out []*ast.File
	for _, name := range mustGlob(t, filepath.Join(r, dir, "*.go")) {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// stringLits returns the string literals of the non-test Go files of dir
// (relative to the repository root) that keep(value) selects.
func stringLits(t *testing.T, r, dir string, keep func(string) bool) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, r, dir) {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err == nil && keep(v) && !slices.Contains(out, v) {
				out = append(out, v)
			}
			return true
		})
	}
	return out
}

// Every redrive-* header the code knows, and every compatibility header the
// DLQ writes, is described in docs/headers.md.
func TestEveryHeaderIsDocumented(t *testing.T) {
	r := root(t)
	doc := read(t, "headers.md")
	redrive := func(v string) bool { return strings.HasPrefix(v, "redrive-") }
	compat := func(v string) bool {
		return strings.HasPrefix(v, "kafka_dlt-") || strings.HasPrefix(v, "__connect.errors.")
	}
	var found []string
	for _, dir := range []string{"retry", "dlq"} {
		found = append(found, stringLits(t, r, dir, redrive)...)
	}
	found = append(found, stringLits(t, r, "dlq", compat)...)
	for _, must := range []string{"redrive-not-ready-since", "redrive-truncated", "kafka_dlt-original-offset", "__connect.errors.topic"} {
		if !slices.Contains(found, must) {
			t.Errorf("the scan of retry/ and dlq/ did not find %q", must)
		}
	}
	for _, h := range found {
		if !strings.Contains(doc, "`"+h+"`") {
			t.Errorf("docs/headers.md does not describe `%s` (a header in the code)", h)
		}
	}
}

// codeConsts returns the values of the string constants named Code* in the
// non-test files of dir.
func codeConsts(t *testing.T, r, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range goFiles(t, r, dir) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}

// Every error code redrive itself writes to redrive-error-code is in the
// table of docs/outcomes.md.
func TestEveryErrorCodeIsDocumented(t *testing.T) {
	r := root(t)
	doc := read(t, "outcomes.md")
	var codes []string
	for _, dir := range []string{"processor", "processor/httphandler", "processor/intake"} {
		codes = append(codes, codeConsts(t, r, dir)...)
	}
	for _, must := range []string{"bad_header", "timeout", "not_ready_deadline", "callback_no_id"} {
		if !slices.Contains(codes, must) {
			t.Errorf("the scan did not find the code %q", must)
		}
	}
	for _, c := range codes {
		if !strings.Contains(doc, "| `"+c+"` |") {
			t.Errorf("docs/outcomes.md has no row for the error code `%s`", c)
		}
	}
}

var flagFuncRE = regexp.MustCompile(`^(String|Bool|Int|Float64|Uint64|Duration|StringArray|StringSlice)(Var)?P?$`)

// Every flag the redrive command defines is in docs/commands.md.
func TestEveryFlagIsDocumented(t *testing.T) {
	r := root(t)
	doc := read(t, "commands.md")
	var flags []string
	for _, f := range goFiles(t, r, filepath.Join("cmd", "redrive")) {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !flagFuncRE.MatchString(sel.Sel.Name) {
				return true
			}
			// The flag name is the first string argument.
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					flags = append(flags, v)
					break
				}
			}
			return true
		})
	}
	for _, must := range []string{"config", "brokers", "dry-run", "from-start", "kafka-port"} {
		if !slices.Contains(flags, must) {
			t.Errorf("the scan of cmd/redrive did not find the flag --%s", must)
		}
	}
	for _, fl := range flags {
		if !strings.Contains(doc, "`--"+fl) {
			t.Errorf("docs/commands.md does not document --%s", fl)
		}
	}
}

// Every subcommand (cobra's Use) is in docs/commands.md.
func TestEveryCommandIsDocumented(t *testing.T) {
	r := root(t)
	doc := read(t, "commands.md")
	var uses []string
	for _, name := range mustGlob(t, filepath.Join(r, "cmd", "redrive", "*.go")) {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader([]byte(read(t, name))))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if v, ok := strings.CutPrefix(line, "Use:"); ok {
				v = strings.Trim(strings.TrimSpace(v), `",`)
				if w := strings.Fields(v); len(w) > 0 && w[0] != "redrive" && w[0] != "use" {
					uses = append(uses, w[0])
				}
			}
		}
	}
	for _, must := range []string{"process", "analyze", "replay", "tail", "demo-solver"} {
		if !slices.Contains(uses, must) {
			t.Errorf("the scan of cmd/redrive did not find the command %s", must)
		}
	}
	var headings []string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "## `redrive ") {
			headings = append(headings, line)
		}
	}
	for _, u := range uses {
		re := regexp.MustCompile(`\b` + regexp.QuoteMeta(u) + `\b`)
		if !slices.ContainsFunc(headings, re.MatchString) {
			t.Errorf("docs/commands.md has no \"## `redrive ...`\" heading for the command %q", u)
		}
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
