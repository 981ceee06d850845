// Package version holds the build version, stamped by the Makefile with
// -ldflags from git describe.
package version

// Unstamped is Version in a build the linker did not stamp.
const Unstamped = "dev"

// Version is the build version; Unstamped for an unstamped build.
var Version = Unstamped // set by the linker
