//go:build unix && !linux

package embeddedpg

import "syscall"

// setParentDeathSignal is a no-op where the OS has no parent-death signal:
// there a crashed parent leaves the server running until Start next sees its
// postmaster.pid (persistent clusters) or it is stopped by hand.
func setParentDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
