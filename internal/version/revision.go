package version

import "runtime/debug"

// Revision is the VCS revision the binary was built from, as the go
// command stamps it (vcs.revision, with "-dirty" when the tree had
// uncommitted changes), or "unknown" when the build carries none (go test,
// go run, or a build outside a checkout).
func Revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case dirty:
		return rev + "-dirty"
	}
	return rev
}
