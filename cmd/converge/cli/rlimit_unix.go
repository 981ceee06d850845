//go:build unix

package cli

import "syscall"

// fileLimit returns the process's RLIMIT_NOFILE: soft and hard.
func fileLimit() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, err
	}
	return uint64(lim.Cur), uint64(lim.Max), nil // int64 fields on some systems (FreeBSD)
}
