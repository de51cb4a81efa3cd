package processor_test

import (
	"os"
	"strings"
	"testing"
)

// README.md's embedding snippet is Example's body, so it compiles.
func TestReadmeEmbeddingIsExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Embed it in Go\n")
	_, block, ok2 := strings.Cut(section, "```go\n")
	snippet, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md has no ```go block under \"## Embed it in Go\"")
	}
	_, fn, ok := strings.Cut(string(src), "\nfunc Example() {\n")
	body, _, ok2 := strings.Cut(fn, "\n}\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no func Example")
	}
	var want strings.Builder
	for _, l := range strings.Split(body, "\n") {
		want.WriteString(strings.TrimPrefix(l, "\t") + "\n")
	}
	if snippet != want.String() {
		t.Errorf("README.md's embedding snippet differs from Example's body; paste it again:\n%s", want.String())
	}
}
