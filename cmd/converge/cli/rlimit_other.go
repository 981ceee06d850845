//go:build !unix

package cli

import "errors"

// fileLimit reports that this system has no RLIMIT_NOFILE.
func fileLimit() (soft, hard uint64, err error) {
	return 0, 0, errors.New("no RLIMIT_NOFILE on this system")
}
