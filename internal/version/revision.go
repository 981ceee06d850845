package version

import "runtime/debug"

// Revision is the commit the build came from, stamped by the Makefile with
// -ldflags from git rev-parse; empty for an unstamped build.
var Revision = "" // set by the linker

// Commit is Revision, or else the commit the go command recorded in the
// binary (vcs.revision, with "-dirty" when the tree had uncommitted
// changes), or "unknown" when neither says (go test, go run, a build
// outside a checkout or with -buildvcs=false and no stamp).
func Commit() string {
	if Revision != "" {
		return Revision
	}
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
