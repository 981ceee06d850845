//go:build !unix

package embeddedpg

import (
	"errors"
	"log/slog"
	"os"
	"syscall"
)

// errUnsupported keeps the package compiling on non-Unix systems, where Start
// fails at once; tests there need DATABASE_URL.
var errUnsupported = errors.New("embedded PostgreSQL is only supported on Unix-like systems; set DATABASE_URL instead")

type runAs struct{ name string }

func lookupRunAs() (*runAs, error) { return nil, errUnsupported }

func sysProcAttr(*runAs, syscall.Signal) *syscall.SysProcAttr { return nil }

func handOver(string, *runAs, *slog.Logger) error { return errUnsupported }

func chownFile(string, *runAs) error { return errUnsupported }

func searchBlocker(string, *runAs) (string, error) { return "", nil }

func checkOwnedBase(string) error { return errUnsupported }

func processAlive(int) bool { return false }

func postmasterOf(int, string) (ours, ok bool) { return false, false }

func signalProcess(pid int, _ syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

const (
	sigFastShutdown      = syscall.SIGINT
	sigImmediateShutdown = syscall.SIGQUIT
)

func lockOwner(string) (*os.File, error) { return nil, errUnsupported }

func tryLock(string) (func(), bool) { return nil, false }
