package embeddedpg

import "syscall"

// setParentDeathSignal asks the kernel to signal the postmaster when this
// process dies, so a crashed test binary or a SIGKILLed `converge dev` cannot
// leave an orphaned server holding its port and shared memory.
//
// Go sets the signal after switching credentials, so it survives the setuid
// to the unprivileged user. The kernel tracks the forking thread, not the
// process; Go only retires threads whose goroutine exited while locked to
// them, which Start never does.
func setParentDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
