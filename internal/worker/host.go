package worker

import (
	"bufio"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	workerpb "github.com/gantry-build/gantry/api/worker/v1"
)

// HostProperties returns the platform properties of this machine, spelled
// as Bazel users write them and BuildStream sends them: OSFamily=linux,
// ISA=x86-64 (or aarch64, x86-32, aarch32, power-isa-le, power-isa-be).
// Other architectures keep Go's name.
func HostProperties() map[string]string {
	return map[string]string{"OSFamily": runtime.GOOS, "ISA": isaName(runtime.GOARCH)}
}

// isaName spells a Go architecture as BuildStream's ISA names it.
func isaName(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86-64"
	case "arm64":
		return "aarch64"
	case "386":
		return "x86-32"
	case "arm":
		return "aarch32"
	case "ppc64le":
		return "power-isa-le"
	case "ppc64":
		return "power-isa-be"
	}
	return goarch
}

// Properties merges the host's properties with configured ones (which
// replace a host property of the same name) into a sorted list for
// registration. A name with several values offers each of them.
func Properties(configured map[string][]string) []*workerpb.Property {
	all := map[string][]string{}
	for k, v := range HostProperties() {
		all[k] = []string{v}
	}
	for k, vs := range configured {
		all[k] = vs
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []*workerpb.Property
	for _, k := range names {
		vs := append([]string(nil), all[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			out = append(out, &workerpb.Property{Name: k, Value: v})
		}
	}
	return out
}

// HostMemory returns the machine's memory in bytes, or 0 if unknown.
func HostMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}
