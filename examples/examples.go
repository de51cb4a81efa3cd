// Package examples holds the starter configurations `redrive init` writes,
// one small working file per use. redrive.example.yaml, at the root of the
// repository, stays the reference with every key.
package examples

import (
	"embed"
	"slices"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Default is the preset `redrive init` writes without --preset.
const Default = "minimal"

// Names lists the presets, sorted.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// File is the preset's YAML, or false when there is no such preset.
func File(name string) ([]byte, bool) {
	b, err := files.ReadFile(name + ".yaml")
	return b, err == nil
}
