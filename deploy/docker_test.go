package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redrive/redrive/internal/kafkatest"
)

// dockerfileRuns returns the Dockerfile's RUN instructions, continuation
// lines joined and BuildKit's --mount/--network/--security options removed.
func dockerfileRuns(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var runs []string
	var cur strings.Builder
	inRun := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if !inRun {
			if strings.HasPrefix(trimmed, "#") || !strings.HasPrefix(strings.ToUpper(trimmed), "RUN ") {
				continue
			}
			inRun = true
			trimmed = strings.TrimSpace(trimmed[4:])
		} else if strings.HasPrefix(trimmed, "#") {
			continue
		}
		cont := strings.HasSuffix(trimmed, "\\")
		cur.WriteString(strings.TrimSuffix(trimmed, "\\"))
		cur.WriteString(" ")
		if !cont {
			fields := strings.Fields(cur.String())
			for len(fields) > 0 && (strings.HasPrefix(fields[0], "--mount=") || strings.HasPrefix(fields[0], "--network=") || strings.HasPrefix(fields[0], "--security=")) {
				fields = fields[1:]
			}
			runs = append(runs, strings.Join(fields, " "))
			cur.Reset()
			inRun = false
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return runs
}

// makeBuildRecipe is what `make build` runs, with VERSION left as the
// shell reference ${VERSION} the Dockerfile's build argument fills.
func makeBuildRecipe(t *testing.T, root string) string {
	t.Helper()
	needTool(t, "make", "apt-get install make")
	out, err := exec.Command("make", "-C", root, "-n", "-s", "--no-print-directory", "build", "GO=go", "VERSION=$${VERSION}").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 {
		t.Fatalf("make build runs %d commands, want one go build:\n%s", len(lines), out)
	}
	return strings.Join(strings.Fields(lines[0]), " ")
}

func TestDockerfileBuildsLikeMakeBuild(t *testing.T) {
	root := repoRoot(t)
	want := makeBuildRecipe(t, root)
	if !strings.Contains(want, "CGO_ENABLED=0") || !strings.Contains(want, "main.version=${VERSION}") {
		t.Fatalf("make build recipe %q: want CGO_ENABLED=0 and -X main.version=$(VERSION)", want)
	}
	var builds []string
	for _, r := range dockerfileRuns(t, filepath.Join(root, "deploy", "Dockerfile")) {
		if strings.Contains(r, "go build") {
			builds = append(builds, r)
		}
	}
	if len(builds) != 1 {
		t.Fatalf("deploy/Dockerfile has %d RUN lines with go build, want 1: %q", len(builds), builds)
	}
	if builds[0] != want {
		t.Errorf("deploy/Dockerfile builds with\n  %s\nbut make build runs\n  %s", builds[0], want)
	}

	df, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(df)
	for _, re := range []string{
		`(?m)^ARG VERSION=`,                             // the version is a build argument
		`(?m)^FROM golang:\$\{GO_VERSION\}\S* AS build`, // multi-stage
		`(?m)^FROM gcr\.io/distroless/static\S*:nonroot$`,
		`(?m)^USER 65532:65532$`,
		`(?m)^ENTRYPOINT \["/redrive"\]$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("deploy/Dockerfile has no line matching %s", re)
		}
	}
	// The builder's Go is the module's.
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(mod))
	if goLine == nil || !strings.Contains(s, "ARG GO_VERSION="+goLine[1]+"\n") {
		t.Errorf("deploy/Dockerfile: want ARG GO_VERSION=%v (go.mod's go line)", goLine)
	}
}

func TestMakeBuildIsStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root := repoRoot(t)
	needTool(t, "make", "apt-get install make")
	const version = "deploytest-static"
	cmd := exec.Command("make", "-C", root, "-s", "--no-print-directory", "build", "VERSION="+version)
	cmd.Env = append(os.Environ(), "GOFLAGS=") // exactly the recipe, no -race or other flags from outside
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	bin := filepath.Join(root, "bin", "redrive")
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	info := string(out)
	// (-trimpath keeps -ldflags out of the build info: the version is
	// checked by running the binary.)
	for _, want := range []string{"\tbuild\tCGO_ENABLED=0\n", "\tbuild\t-trimpath=true\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("go version -m %s lacks %q:\n%s", bin, want, info)
		}
	}
	if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.Contains(string(out), version) {
		t.Errorf("%s version = %q, %v; want the stamped %s", bin, out, err, version)
	}
	// The container args of the manifests parse (unknown flags fail).
	for _, args := range [][]string{{"process", "-c", "/etc/redrive/redrive.yaml", "--log-json", "--help"}, {"analyze", "-c", "/etc/redrive/redrive.yaml", "--log-json", "--help"}} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Errorf("redrive %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if _, err := exec.LookPath("file"); err != nil {
		if kafkatest.InCI() {
			t.Fatalf("file(1) is not installed: apt-get install file")
		}
		t.Logf("file(1) is not installed; checked with go version -m only")
		return
	}
	fo, err := exec.Command("file", "-b", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("file: %v\n%s", err, fo)
	}
	if !strings.Contains(string(fo), "statically linked") {
		t.Errorf("file %s: %s (want statically linked)", bin, fo)
	}
}
