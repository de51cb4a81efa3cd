package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instructions returns a Containerfile's instructions (continuation lines
// joined, comments dropped) as "KEYWORD rest", the keyword upper-cased.
func instructions(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		cur.WriteString(strings.TrimSuffix(line, "\\"))
		cur.WriteString(" ")
		if !cont {
			fields := strings.Fields(cur.String())
			cur.Reset()
			if len(fields) == 0 {
				continue
			}
			fields[0] = strings.ToUpper(fields[0])
			out = append(out, strings.Join(fields, " "))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// finalStage is the instructions after the last FROM, FROM included.
func finalStage(ins []string) []string {
	last := 0
	for i, in := range ins {
		if strings.HasPrefix(in, "FROM ") {
			last = i
		}
	}
	return ins[last:]
}

var labelRE = regexp.MustCompile(`([a-z.]+)="([^"]*)"`)

// stageLabels are the LABEL key="value" pairs of a stage.
func stageLabels(stage []string) map[string]string {
	m := map[string]string{}
	for _, in := range stage {
		if strings.HasPrefix(in, "LABEL ") {
			for _, kv := range labelRE.FindAllStringSubmatch(in, -1) {
				m[kv[1]] = kv[2]
			}
		}
	}
	return m
}

func withPrefix(stage []string, prefix string) []string {
	var out []string
	for _, in := range stage {
		if strings.HasPrefix(in, prefix) {
			out = append(out, in)
		}
	}
	return out
}

// TestContainerfileIsScratch: deploy/Containerfile pulls nothing (FROM
// scratch, one stage), runs nothing at build time, copies only the binary
// and the CA bundle, and runs as a numeric non-root user.
func TestContainerfileIsScratch(t *testing.T) {
	ins := instructions(t, filepath.Join(repoRoot(t), "deploy", "Containerfile"))
	if from := withPrefix(ins, "FROM "); !slices.Equal(from, []string{"FROM scratch"}) {
		t.Errorf("Containerfile FROM lines %q, want only FROM scratch", from)
	}
	if runs := withPrefix(ins, "RUN "); len(runs) > 0 {
		t.Errorf("Containerfile runs %q at build time: a scratch image has nothing to run it with", runs)
	}
	copies := withPrefix(ins, "COPY ")
	slices.Sort(copies)
	want := []string{"COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt", "COPY redrive /redrive"}
	if !slices.Equal(copies, want) {
		t.Errorf("Containerfile COPY lines %q, want %q", copies, want)
	}
	for _, w := range []string{"USER 65532:65532", `ENTRYPOINT ["/redrive"]`, "ARG VERSION=dev"} {
		if !slices.Contains(ins, w) {
			t.Errorf("Containerfile has no %q", w)
		}
	}
	l := stageLabels(ins)
	if l["org.opencontainers.image.version"] != "${VERSION}" {
		t.Errorf("label org.opencontainers.image.version = %q, want ${VERSION}", l["org.opencontainers.image.version"])
	}
	if src := l["org.opencontainers.image.source"]; src != "${SOURCE}" || !slices.Contains(ins, "ARG SOURCE=https://github.com/redrive/redrive") {
		t.Errorf("label org.opencontainers.image.source = %q, want ${SOURCE} from ARG SOURCE=https://github.com/redrive/redrive", src)
	}
}

// TestContainerfileLikeDockerfile: the scratch image and the Docker image
// are the same to their users: user, entrypoint, default command, ports
// and labels of the Dockerfile's final stage.
func TestContainerfileLikeDockerfile(t *testing.T) {
	root := repoRoot(t)
	cf := instructions(t, filepath.Join(root, "deploy", "Containerfile"))
	df := finalStage(instructions(t, filepath.Join(root, "deploy", "Dockerfile")))
	for _, kw := range []string{"USER ", "ENTRYPOINT ", "CMD ", "EXPOSE "} {
		if a, b := withPrefix(cf, kw), withPrefix(df, kw); !slices.Equal(a, b) || len(a) != 1 {
			t.Errorf("%s: Containerfile %q, Dockerfile %q; want the same one", strings.TrimSpace(kw), a, b)
		}
	}
	lc, ld := stageLabels(cf), stageLabels(df)
	for k, v := range ld {
		if lc[k] != v {
			t.Errorf("label %s: Containerfile %q, Dockerfile %q", k, lc[k], v)
		}
	}
	for k := range lc {
		if _, ok := ld[k]; !ok {
			t.Errorf("label %s is in the Containerfile, not in the Dockerfile", k)
		}
	}
}

// TestImageOCIBuildsWithMakeBuild: `make image-oci` builds the binary with
// `make build` (the recipe the Dockerfile's go build line equals), stages it
// and the CA bundle under the names the Containerfile copies, and builds
// deploy/Containerfile with VERSION as its build argument.
func TestImageOCIBuildsWithMakeBuild(t *testing.T) {
	root := repoRoot(t)
	build := makeBuildRecipe(t, root)
	out, err := exec.Command("make", "-C", root, "-n", "-s", "--no-print-directory", "image-oci",
		"GO=go", "VERSION=$${VERSION}", "OCI_BUILDER=buildah", "OCI_FLAGS=", "CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt", "IMAGE=redrive:test").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image-oci: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	if len(lines) == 0 || lines[0] != build {
		t.Fatalf("make image-oci runs first\n  %q\nwant make build's\n  %s", lines, build)
	}
	script := strings.Join(lines, "\n")
	for _, w := range []string{
		"cp bin/redrive bin/image/redrive",
		"cp /etc/ssl/certs/ca-certificates.crt bin/image/ca-certificates.crt",
		"buildah build -f deploy/Containerfile --build-arg VERSION=${VERSION} -t redrive:test bin/image",
	} {
		if !strings.Contains(script, w) {
			t.Errorf("make image-oci does not run %q:\n%s", w, script)
		}
	}
}
