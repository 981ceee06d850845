//go:build unix

package embeddedpg

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// runAs is the unprivileged account the server runs as when this process is
// root, because initdb and postgres refuse to run as root.
type runAs struct {
	name string
	uid  uint32
	gid  uint32
}

// lookupRunAs returns nil when the process is not root: then the server simply
// runs as the current user.
func lookupRunAs() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("user %s: bad uid %q: %w", name, u.Uid, err))
			continue
		}
		gid, err := strconv.ParseUint(u.Gid, 10, 32)
		if err != nil {
			errs = append(errs, fmt.Errorf("user %s: bad gid %q: %w", name, u.Gid, err))
			continue
		}
		return &runAs{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as: %w",
		errors.Join(errs...))
}

// sysProcAttr runs the child as the unprivileged user (if any), in its own
// process group so a terminal's Ctrl-C reaches only the parent (which then
// stops the server in order), and ties the child's life to the parent where
// the OS allows it (see setParentDeathSignal).
func sysProcAttr(ra *runAs, deathSignal syscall.Signal) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if ra != nil {
		attr.Credential = &syscall.Credential{Uid: ra.uid, Gid: ra.gid}
	}
	setParentDeathSignal(attr, deathSignal)
	return attr
}

// handOver gives the data directory to the unprivileged user: postgres must
// own its data dir. It changes nothing outside dir: every ancestor must
// already let the user through (Start keeps the cluster elsewhere when they
// do not, see clusterDir).
func handOver(dir string, ra *runAs, _ *slog.Logger) error {
	if ra == nil {
		return nil
	}
	if p, err := searchBlocker(filepath.Dir(dir), ra); err != nil {
		return err
	} else if p != "" {
		return fmt.Errorf("user %s cannot reach %s: %s is not searchable by it", ra.name, dir, p)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot stat %s: %w", dir, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == ra.uid {
		return nil // already handed over on an earlier run
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, int(ra.uid), int(ra.gid)); err != nil {
			return fmt.Errorf("cannot chown %s to %s: %w", path, ra.name, err)
		}
		return nil
	})
}

// searchBlocker returns the first of dir and its ancestors that ra cannot
// search (or that does not exist: whatever Start created there would be
// root's, 0700), or "" when ra can walk down to dir. It only looks.
func searchBlocker(dir string, ra *runAs) (string, error) {
	if ra == nil {
		return "", nil
	}
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return p, nil
		case err != nil:
			return "", fmt.Errorf("cannot stat %s: %w", p, err)
		case !canSearch(fi, ra):
			return p, nil
		}
		if p == filepath.Dir(p) {
			return "", nil
		}
	}
}

// checkOwnedBase checks that dir, the base under which a root process keeps
// relocated clusters, is a real directory owned by root that nobody else
// may write to, so no other user can plant or swap a cluster there.
func checkOwnedBase(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("cannot stat %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case ok && st.Uid != 0:
		return fmt.Errorf("%s is not owned by root (uid %d); remove it or fix its owner", dir, st.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others (mode %#o); remove it or fix its mode", dir, fi.Mode().Perm())
	}
	return nil
}

func canSearch(fi os.FileInfo, ra *runAs) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true // cannot tell; let postgres report it
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == ra.uid:
		return perm&0o100 != 0
	case st.Gid == ra.gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// chownFile hands a file we created (the server log) to the server's user so
// the data dir stays uniformly owned.
func chownFile(path string, ra *runAs) error {
	if ra == nil {
		return nil
	}
	if err := os.Lchown(path, int(ra.uid), int(ra.gid)); err != nil {
		return fmt.Errorf("cannot chown %s to %s: %w", path, ra.name, err)
	}
	return nil
}

// processAlive reports whether pid is running. EPERM means it exists but
// belongs to someone else, which still counts. A zombie does not: it has
// exited and only awaits its parent's wait (a container whose pid 1 does not
// reap leaves those behind).
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs: trust kill
	}
	// The state follows the parenthesised command name, which may contain spaces.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// postmasterOf reports whether pid is a postmaster serving dataDir. A
// postmaster chdirs into its data directory, so on Linux its cwd identifies
// it; a recycled pid (common in containers after a crash) does not match.
// ok is false where the OS gives no way to tell.
func postmasterOf(pid int, dataDir string) (ours, ok bool) {
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		if _, statErr := os.Stat("/proc/self"); statErr != nil {
			return false, false // no procfs (macOS, BSD)
		}
		return false, true // the process vanished or is unreadable: not a server we can use
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		want = dataDir
	}
	return cwd == want, true
}

func signalProcess(pid int, sig syscall.Signal) error {
	return syscall.Kill(pid, sig)
}

const (
	// sigFastShutdown is what `pg_ctl stop -m fast` sends: roll back open
	// transactions, disconnect clients, checkpoint, exit.
	sigFastShutdown = syscall.SIGINT
	// sigImmediateShutdown is `pg_ctl stop -m immediate`: exit at once; the
	// next start runs crash recovery.
	sigImmediateShutdown = syscall.SIGQUIT
)

// lockOwner creates path and holds an exclusive flock on it for as long as
// the returned file stays open, marking the directory as in use by this
// process (see sweepAbandoned).
func lockOwner(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cannot lock %s: %w", path, err)
	}
	return f, nil
}

// tryLock takes the flock on an existing lock file; ok is false if the file
// is missing or another live process holds the lock.
func tryLock(path string) (release func(), ok bool) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return func() { _ = f.Close() }, true
}
