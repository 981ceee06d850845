// Package version holds the build version, stamped by the Makefile with
// -ldflags from git describe.
package version

// Version is the build version; "dev" for an unstamped build.
var Version = "dev" // set by the linker
