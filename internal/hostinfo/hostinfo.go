// Package hostinfo describes the machine a benchmark or soak ran on, for
// the heading of its table: CPUs and their model, RAM, Go and the OS.
package hostinfo

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Describe is one line: "2 CPUs (<model>), 23.5 GiB RAM, go1.x linux/amd64".
func Describe() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64); err == nil {
					mem = fmt.Sprintf(", %.1f GiB RAM", kb/1024/1024)
				}
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s)%s, %s %s/%s", runtime.NumCPU(), cpu, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
