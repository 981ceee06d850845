// Package embeddedpg runs a real PostgreSQL server from the server binaries
// installed on the machine, so `converge dev` and the test suite need neither
// an external database nor Docker.
//
// A Server owns one postmaster. Start runs it directly as a child process
// rather than letting pg_ctl daemonise it, so the server's lifetime is bounded
// by its parent's: on Linux the kernel sends it a shutdown signal if the parent
// dies, so a test binary killed by -timeout or a SIGKILLed `converge dev` does
// not leave an orphan holding a port. Stop performs what `pg_ctl stop -m fast`
// does (SIGINT to the postmaster, wait for exit).
//
// A cluster is either persistent or throwaway:
//
//   - Persistent (converge dev): the data dir survives Stop and the next Start
//     reuses it (PG_VERSION present), with PostgreSQL's durable defaults. A
//     postmaster.pid left by a crash is checked: a dead or recycled pid is
//     removed, a server still running on the dir from an earlier run is shut
//     down first.
//   - Throwaway (tests): initdb --no-sync; fsync, synchronous_commit and
//     full_page_writes off; Stop deletes the data dir.
//
// The server listens on 127.0.0.1 only, plus a unix socket in the data dir (or
// in a short directory under /tmp when the data dir's path is too long for a
// socket address). Its log goes to embeddedpg.log in the data dir, and start
// failures quote the log's tail.
//
// PostgreSQL refuses to run as root. When this process is root, the cluster is
// initialised and run as the `postgres` user (or `nobody`), which must own the
// cluster's directory and be able to walk down to it. Start never changes the
// permissions of anything outside the directories it creates for the cluster:
// when every ancestor of DataDir already lets that user through, the cluster
// stays in DataDir (chowned to the user); otherwise (a data dir under /root,
// say) it is kept in RootBaseDir/<name>-<hash of DataDir> instead (default
// /var/lib/converge-embeddedpg, created 0755 and owned by root; the cluster's
// directory is 0700 and owned by the user), the same place on every start.
// ClusterDir says where; Server.DataDir says where a running cluster is.
package embeddedpg

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// StartTimeoutDefault bounds Start when ctx has no deadline. initdb and a
	// cold start take a few seconds; the rest covers crash recovery of a large
	// dev cluster.
	StartTimeoutDefault = 60 * time.Second
	// StopTimeoutDefault bounds the fast shutdown in Stop when ctx has no
	// deadline, after which the server is shut down immediately.
	StopTimeoutDefault = 30 * time.Second

	// Superuser is the role initdb creates; DSN connects as it, with trust
	// authentication (the server listens on loopback only).
	Superuser = "postgres"

	// DefaultRootBaseDir is where a root process keeps clusters the
	// unprivileged user cannot reach at their DataDir (Config.RootBaseDir).
	DefaultRootBaseDir = "/var/lib/converge-embeddedpg"

	logFileName = "embeddedpg.log"
	// A throwaway cluster without a DataDir lives in os.TempDir()/embeddedpg-*/data,
	// next to ownerLockName, which its process holds an flock on.
	tempDirPrefix = "embeddedpg-"
	ownerLockName = "owner.lock"
	pidFileName   = "postmaster.pid"
	// maxSocketPath keeps "<dir>/.s.PGSQL.<port>" inside sun_path (104 bytes
	// on macOS, 108 on Linux) with room to spare.
	maxSocketPath = 100
	// portAttempts is how often Start retries when a port it picked is taken
	// between choosing and binding it (parallel test binaries race for ports).
	portAttempts = 5
	// logTailBytes is how much of the server log start errors quote.
	logTailBytes = 4 << 10
)

// reservedSettings are managed by Start; letting Settings override them would
// make DSN lie about where the server listens.
var reservedSettings = []string{"listen_addresses", "port", "unix_socket_directories"}

// errPortInUse marks a start that failed only because the port was taken.
var errPortInUse = errors.New("port already in use")

// Config configures Start.
type Config struct {
	// DataDir is the cluster's data directory (PGDATA). If it holds an
	// initialised cluster (PG_VERSION exists) the cluster is reused, otherwise
	// it is created with initdb (it must then be empty or absent). Empty means
	// a new directory under os.TempDir(), which requires Persistent false.
	DataDir string
	// Port is the TCP port on 127.0.0.1. Defaults to 0, which picks a free
	// port (and picks again if another process takes it first).
	Port int
	// Persistent keeps the data across Stop and runs with PostgreSQL's
	// durable defaults. When false the cluster is for tests: initdb --no-sync,
	// fsync, synchronous_commit and full_page_writes off, and Stop deletes
	// DataDir.
	Persistent bool
	// RootBaseDir matters only when this process is root and the PostgreSQL
	// user cannot walk down to DataDir: the cluster is then kept in a
	// directory of its own under RootBaseDir (see the package doc). Its
	// parent must exist; Start creates it (0755, root's) if missing and
	// refuses one that is not root's or that others may write to. Defaults
	// to DefaultRootBaseDir.
	RootBaseDir string
	// Log receives start and stop events. Nil discards them. The server's own
	// log always goes to embeddedpg.log in DataDir.
	Log *slog.Logger
	// Settings are extra server parameters (postgres -c name=value). They
	// override the defaults: max_connections=300 (tests open many pools),
	// shared_buffers=128MB, and for non-persistent clusters fsync=off,
	// synchronous_commit=off, full_page_writes=off. listen_addresses, port and
	// unix_socket_directories are set by Start and rejected here.
	Settings map[string]string
	// StandbyOf, when set, is the DSN of a running server (another
	// Server's DSN): a new cluster is copied from it with pg_basebackup
	// instead of initdb, and runs as its hot standby, read-only and
	// streaming its WAL (tests use it as a read replica). An initialised
	// DataDir is reused as it is.
	StandbyOf string
}

func (c Config) validate() error {
	if c.Persistent && c.DataDir == "" {
		return errors.New("a DataDir is required when Persistent is set (a temporary dir would not persist)")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("port %d is out of range 0-65535", c.Port)
	}
	for _, k := range reservedSettings {
		if _, ok := c.Settings[k]; ok {
			return fmt.Errorf("settings must not set %s: Start manages it", k)
		}
	}
	return nil
}

// ClusterDir returns the directory Start keeps the cluster of c.DataDir in:
// DataDir itself, unless this process is root and the PostgreSQL user cannot
// walk down to DataDir (then a directory under RootBaseDir). It changes
// nothing. For a throwaway cluster without a DataDir it returns "".
func (c Config) ClusterDir() (string, error) {
	if c.DataDir == "" {
		return "", nil
	}
	dir, err := filepath.Abs(c.DataDir)
	if err != nil {
		return "", fmt.Errorf("embeddedpg: bad DataDir %q: %w", c.DataDir, err)
	}
	ra, err := lookupRunAs()
	if err != nil {
		return "", fmt.Errorf("embeddedpg: %w", err)
	}
	where, _, err := c.clusterDir(dir, ra)
	return where, err
}

// clusterDir is ClusterDir for an absolute dir; relocated reports that the
// cluster lives under RootBaseDir. A cluster already initialised in dir that
// the user cannot reach is an error, not a reason to start an empty one
// elsewhere.
func (c Config) clusterDir(dir string, ra *runAs) (where string, relocated bool, err error) {
	if ra == nil {
		return dir, false, nil
	}
	blocker, err := searchBlocker(filepath.Dir(dir), ra)
	if err != nil {
		return "", false, err
	}
	if blocker == "" {
		return dir, false, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return "", false, fmt.Errorf("the cluster in %s cannot be reached by user %s (%s is not searchable by it), "+
			"and embeddedpg does not change permissions outside the cluster's directory: move the cluster "+
			"to a directory the user can reach, or give %s the search bit yourself", dir, ra.name, blocker, blocker)
	}
	base := cmp.Or(c.RootBaseDir, DefaultRootBaseDir)
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(base, filepath.Base(dir)+"-"+hex.EncodeToString(sum[:8])), true, nil
}

// prepareRelocated creates the base directory (root's, 0755) and the
// cluster's directory under it (0700; prepareDirs hands it to the user).
func prepareRelocated(where string, ra *runAs) error {
	base := filepath.Dir(where)
	if p, err := searchBlocker(filepath.Dir(base), ra); err != nil {
		return err
	} else if p != "" {
		return fmt.Errorf("user %s cannot reach %s: %s is missing or not searchable by it; set another RootBaseDir",
			ra.name, base, p)
	}
	switch err := os.Mkdir(base, 0o755); {
	case err == nil:
		if err := os.Chmod(base, 0o755); err != nil { // whatever the umask
			return fmt.Errorf("cannot set the mode of %s: %w", base, err)
		}
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("cannot create %s: %w", base, err)
	}
	if err := checkOwnedBase(base); err != nil {
		return err
	}
	if p, err := searchBlocker(base, ra); err != nil {
		return err
	} else if p != "" {
		return fmt.Errorf("user %s cannot search %s; remove it or fix its mode", ra.name, p)
	}
	if err := os.Mkdir(where, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cannot create %s: %w", where, err)
	}
	return nil
}

// Server is a running PostgreSQL cluster started by Start. Stop it exactly
// once; DSN is safe for concurrent use.
type Server struct {
	cfg   Config
	log   *slog.Logger
	bins  binaries
	runAs *runAs

	dataDir    string
	removeDir  string    // deleted by Stop (non-persistent) or by a failed Start
	ownerLock  io.Closer // held while this process owns a temp cluster (see sweepAbandoned)
	sockDir    string
	ownSockDir bool // sockDir is a temp dir of ours under /tmp
	port       int
	logFile    *os.File

	// mu guards proc and stopping: Watch swaps proc when it restarts the
	// server, and holds mu while it does, so Stop shuts down whichever
	// postmaster is current.
	mu       sync.Mutex
	proc     *process
	stopping bool
	stopCh   chan struct{} // closed when Stop begins
	watching chan struct{} // closed when Watch's goroutine ends; nil without Watch

	stopOnce sync.Once
	stopErr  error
}

// process is one postmaster run; exited is closed once err holds cmd.Wait's result.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Start initialises (or reuses) a cluster in cfg.DataDir, starts the server and
// returns once it accepts connections. The returned error wraps ErrNoBinaries
// when the machine has no server binaries.
func Start(ctx context.Context, cfg Config) (_ *Server, retErr error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("embeddedpg: invalid config: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartTimeoutDefault)
		defer cancel()
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	begin := time.Now()

	bins, err := findBinaries(ctx, debianBinGlob)
	if err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}
	ra, err := lookupRunAs()
	if err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}
	s := &Server{cfg: cfg, log: log, bins: bins, runAs: ra, stopCh: make(chan struct{})}
	createdTemp := false
	defer func() {
		if retErr == nil {
			return
		}
		if s.logFile != nil {
			_ = s.logFile.Close() // the start error is what matters
		}
		if s.ownSockDir {
			_ = os.RemoveAll(s.sockDir)
		}
		if createdTemp {
			_ = os.RemoveAll(s.removeDir)
		}
		if s.ownerLock != nil {
			_ = s.ownerLock.Close()
		}
	}()

	if cfg.DataDir == "" {
		sweepAbandoned(log)
		root, err := os.MkdirTemp("", tempDirPrefix)
		if err != nil {
			return nil, fmt.Errorf("embeddedpg: cannot create data dir: %w", err)
		}
		s.removeDir, createdTemp = root, true
		lock, err := lockOwner(filepath.Join(root, ownerLockName))
		if err != nil {
			return nil, fmt.Errorf("embeddedpg: %w", err)
		}
		s.ownerLock = lock
		s.dataDir = filepath.Join(root, "data")
		if err := os.Mkdir(s.dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("embeddedpg: cannot create data dir: %w", err)
		}
		if err := chownFile(root, ra); err != nil {
			return nil, fmt.Errorf("embeddedpg: %w", err)
		}
	} else {
		dir, err := filepath.Abs(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("embeddedpg: bad DataDir %q: %w", cfg.DataDir, err)
		}
		where, relocated, err := cfg.clusterDir(dir, ra)
		if err != nil {
			return nil, fmt.Errorf("embeddedpg: %w", err)
		}
		if relocated {
			if err := prepareRelocated(where, ra); err != nil {
				return nil, fmt.Errorf("embeddedpg: %w", err)
			}
			log.Info("the PostgreSQL user cannot reach the data dir; keeping the cluster in a directory of its own",
				"data_dir", dir, "cluster_dir", where, "user", ra.name)
			dir = where
		} else if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("embeddedpg: cannot create data dir: %w", err)
		}
		s.dataDir = dir
		if !cfg.Persistent {
			s.removeDir = dir
		}
	}
	if err := s.prepareDirs(); err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}

	initialised, err := s.initialised()
	if err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}
	if initialised {
		if err := s.checkVersion(ctx); err != nil {
			return nil, fmt.Errorf("embeddedpg: %w", err)
		}
		if err := s.clearLeftover(ctx); err != nil {
			return nil, fmt.Errorf("embeddedpg: %w", err)
		}
	} else if cfg.StandbyOf != "" {
		if err := s.basebackup(ctx); err != nil {
			return nil, fmt.Errorf("embeddedpg: %w", err)
		}
	} else if err := s.initdb(ctx); err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}

	if err := s.openLog(); err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}
	if err := s.launch(ctx); err != nil {
		return nil, fmt.Errorf("embeddedpg: %w", err)
	}
	log.Info("embedded postgres started",
		"port", s.port, "data_dir", s.dataDir, "log", filepath.Join(s.dataDir, logFileName),
		"reused", initialised, "persistent", cfg.Persistent, "duration", time.Since(begin))
	return s, nil
}

// WatchConfig bounds Watch's restarts.
type WatchConfig struct {
	// Attempts is how many restarts Watch tries after the server exits
	// before it gives up. The budget refills once a restarted server has
	// stayed up for Healthy. Defaults to 5.
	Attempts int
	// Backoff is the wait before the second attempt, doubling up to 10s
	// (the first attempt is immediate). Defaults to 1s.
	Backoff time.Duration
	// Healthy is how long a server must stay up to refill the budget.
	// Defaults to 1 minute.
	Healthy time.Duration
}

// Watch supervises the postmaster: when it exits without Stop (killed,
// crashed, shut down by someone else) Watch logs it and starts it again on
// the same port and data dir, so DSN stays valid and clients reconnect,
// logging every attempt. When WatchConfig.Attempts restarts in a row fail,
// the returned channel receives the error and closes: the caller should
// exit loudly. It also closes, without a value, when ctx ends or Stop is
// called. Call Watch at most once.
func (s *Server) Watch(ctx context.Context, cfg WatchConfig) <-chan error {
	cfg.Attempts = cmp.Or(cfg.Attempts, 5)
	cfg.Backoff = cmp.Or(cfg.Backoff, time.Second)
	cfg.Healthy = cmp.Or(cfg.Healthy, time.Minute)
	errc := make(chan error, 1)
	s.watching = make(chan struct{})
	go func() {
		defer close(s.watching)
		defer close(errc)
		if err := s.watch(ctx, cfg); err != nil {
			errc <- err
		}
	}()
	return errc
}

func (s *Server) watch(ctx context.Context, cfg WatchConfig) error {
	budget, upSince := cfg.Attempts, time.Now()
	for {
		s.mu.Lock()
		p := s.proc
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopCh:
			return nil
		case <-p.exited:
		}
		if time.Since(upSince) >= cfg.Healthy {
			budget = cfg.Attempts
		}
		s.log.Error("embedded postgres exited unexpectedly; restarting it",
			"pid", p.cmd.Process.Pid, "err", p.err, "data_dir", s.dataDir, "log", filepath.Join(s.dataDir, logFileName))
		var lastErr error
		wait := time.Duration(0)
		for attempt := 1; ; attempt++ {
			if budget == 0 {
				return fmt.Errorf("embeddedpg: the server exited and %d restarts failed; last error: %w", cfg.Attempts, lastErr)
			}
			budget--
			select {
			case <-ctx.Done():
				return nil
			case <-s.stopCh:
				return nil
			case <-time.After(wait):
			}
			wait = min(max(2*wait, cfg.Backoff), 10*time.Second)
			restarted, err := s.restart(ctx)
			if !restarted && err == nil {
				return nil // Stop began
			}
			if err == nil {
				s.log.Warn("embedded postgres restarted", "attempt", attempt, "port", s.port, "data_dir", s.dataDir)
				upSince = time.Now()
				break
			}
			lastErr = err
			s.log.Error("embedded postgres restart failed", "attempt", attempt, "attempts_left", budget, "err", err)
		}
	}
}

// restart starts the postmaster again on the same port, unless Stop has
// begun (restarted false, err nil).
func (s *Server) restart(ctx context.Context) (restarted bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeoutDefault)
	defer cancel()
	if err := s.clearLeftover(ctx); err != nil {
		return false, err
	}
	if err := s.startProcess(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// DataDir returns the directory the cluster lives in (see ClusterDir).
func (s *Server) DataDir() string { return s.dataDir }

// DSN returns a connection URL for dbname as the superuser over TCP.
func (s *Server) DSN(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.port, url.PathEscape(dbname))
}

// Stop shuts the server down fast (open transactions roll back, clients are
// disconnected) and waits for it to exit; if ctx ends first it falls back to
// an immediate shutdown. A non-persistent cluster's data dir is then deleted.
// Later calls return the first call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.stopErr = s.stop(ctx)
	})
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StopTimeoutDefault)
		defer cancel()
	}
	begin := time.Now()
	s.mu.Lock() // waits for a restart in progress
	s.stopping = true
	close(s.stopCh)
	s.mu.Unlock()
	if s.watching != nil {
		<-s.watching
	}
	var errs []error
	if err := s.shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.logFile.Close(); err != nil {
		errs = append(errs, fmt.Errorf("cannot close server log: %w", err))
	}
	if s.ownSockDir {
		if err := os.RemoveAll(s.sockDir); err != nil {
			errs = append(errs, fmt.Errorf("cannot remove socket dir: %w", err))
		}
	}
	if s.removeDir != "" {
		if err := os.RemoveAll(s.removeDir); err != nil {
			errs = append(errs, fmt.Errorf("cannot remove data dir: %w", err))
		}
	}
	if s.ownerLock != nil {
		if err := s.ownerLock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cannot release data dir lock: %w", err))
		}
	}
	s.log.Info("embedded postgres stopped", "data_dir", s.dataDir, "removed", s.removeDir != "",
		"duration", time.Since(begin))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("embeddedpg: stop: %w", err)
	}
	return nil
}

func (s *Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	select {
	case <-p.exited:
		return fmt.Errorf("server had already exited (%v); log tail:\n%s", p.err, s.logTail(0))
	default:
	}
	if err := signalProcess(p.cmd.Process.Pid, sigFastShutdown); err != nil {
		return fmt.Errorf("cannot signal server: %w", err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("server exited uncleanly: %w", p.err)
		}
		return nil
	case <-ctx.Done():
	}
	// The fast shutdown overran its budget; stop waiting for a checkpoint.
	_ = signalProcess(p.cmd.Process.Pid, sigImmediateShutdown)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return fmt.Errorf("fast shutdown did not finish: %w; forced an immediate shutdown", ctx.Err())
}

// prepareDirs fixes the data dir's mode (postgres insists on 0700 or 0750),
// chooses the socket dir and hands both to the unprivileged user when root.
func (s *Server) prepareDirs() error {
	fi, err := os.Stat(s.dataDir)
	if err != nil {
		return fmt.Errorf("cannot stat data dir: %w", err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 && perm != 0o750 {
		if err := os.Chmod(s.dataDir, 0o700); err != nil {
			return fmt.Errorf("cannot set data dir mode to 0700: %w", err)
		}
	}
	if err := handOver(s.dataDir, s.runAs, s.log); err != nil {
		return err
	}

	s.sockDir = s.dataDir
	if len(s.dataDir)+len("/.s.PGSQL.65535") >= maxSocketPath {
		dir, err := os.MkdirTemp("/tmp", "pgsock-")
		if err != nil {
			return fmt.Errorf("cannot create socket dir: %w", err)
		}
		s.sockDir, s.ownSockDir = dir, true
		if err := chownFile(dir, s.runAs); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) initialised() (bool, error) {
	_, err := os.Stat(filepath.Join(s.dataDir, "PG_VERSION"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("cannot inspect data dir: %w", err)
	}
}

func (s *Server) checkVersion(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(s.dataDir, "PG_VERSION"))
	if err != nil {
		return fmt.Errorf("cannot read PG_VERSION: %w", err)
	}
	have := strings.TrimSpace(string(b))
	want, err := s.bins.majorVersion(ctx)
	if err != nil {
		return err
	}
	if have != want {
		return fmt.Errorf("data dir %s was created by PostgreSQL %s but the server binaries in %s are PostgreSQL %s; "+
			"delete the data dir (its data is lost) or install PostgreSQL %s", s.dataDir, have, s.bins.dir, want, have)
	}
	return nil
}

// clearLeftover makes sure a postmaster.pid left by a crash cannot block the
// start. postgres itself ignores a pid file whose pid is dead, but in a
// container a recycled pid often belongs to some unrelated live process, which
// postgres would take for a running server.
func (s *Server) clearLeftover(ctx context.Context) error {
	path := filepath.Join(s.dataDir, pidFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", path, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || !processAlive(pid) {
		s.log.Info("removing stale postmaster.pid", "data_dir", s.dataDir, "pid", first)
		return removeFile(path)
	}
	ours, known := postmasterOf(pid, s.dataDir)
	switch {
	case !known:
		return fmt.Errorf("%s names pid %d, which is running; stop that server, or delete the file if it is not PostgreSQL",
			path, pid)
	case !ours:
		s.log.Warn("removing postmaster.pid naming an unrelated process (recycled pid)", "pid", pid)
		return removeFile(path)
	}

	s.log.Warn("stopping a server left running on this data dir by an earlier run", "pid", pid)
	if err := signalProcess(pid, sigFastShutdown); err != nil {
		return fmt.Errorf("cannot stop leftover server (pid %d): %w", pid, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) || !processAlive(pid) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("leftover server (pid %d) did not stop: %w", pid, ctx.Err())
		case <-tick.C:
		}
	}
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cannot remove %s: %w", path, err)
	}
	return nil
}

func (s *Server) initdb(ctx context.Context) error {
	args := []string{
		"-D", s.dataDir,
		"-A", "trust",
		"-U", Superuser,
		"--encoding=UTF8",
		// C collation: identical on every machine and the fastest to sort.
		"--locale=C",
	}
	if !s.cfg.Persistent {
		args = append(args, "--no-sync")
	}
	begin := time.Now()
	cmd := exec.CommandContext(ctx, s.bins.initdb, args...)
	cmd.Dir = s.dataDir // the unprivileged user may not be able to enter our cwd
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(s.runAs, 0)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb failed: %w; output:\n%s", err, tail(out, logTailBytes))
	}
	s.log.Info("initialised cluster", "data_dir", s.dataDir, "duration", time.Since(begin))
	return nil
}

// basebackup copies the cluster of StandbyOf into the data dir and
// configures it as a standby of that server (standby.signal and
// primary_conninfo, pg_basebackup -R).
func (s *Server) basebackup(ctx context.Context) error {
	if !isExecutable(s.bins.basebackup) {
		return fmt.Errorf("a standby needs pg_basebackup, which is not in %s", s.bins.dir)
	}
	args := []string{"-d", s.cfg.StandbyOf, "-D", s.dataDir, "-R", "--wal-method=stream", "--checkpoint=fast"}
	if !s.cfg.Persistent {
		args = append(args, "--no-sync")
	}
	begin := time.Now()
	cmd := exec.CommandContext(ctx, s.bins.basebackup, args...)
	cmd.Dir = s.dataDir
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(s.runAs, 0)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_basebackup failed: %w; output:\n%s", err, tail(out, logTailBytes))
	}
	s.log.Info("copied the primary into a standby", "data_dir", s.dataDir, "duration", time.Since(begin))
	return nil
}

func (s *Server) openLog() error {
	path := filepath.Join(s.dataDir, logFileName)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("cannot open server log: %w", err)
	}
	s.logFile = f
	return chownFile(path, s.runAs)
}

// launch starts the postmaster, retrying with another port when a port it
// picked itself was taken in the meantime.
func (s *Server) launch(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		s.port = s.cfg.Port
		if s.port == 0 {
			p, err := freePort()
			if err != nil {
				return err
			}
			s.port = p
		}
		err := s.startProcess(ctx)
		if err == nil {
			return nil
		}
		if s.cfg.Port == 0 && attempt < portAttempts && errors.Is(err, errPortInUse) {
			s.log.Debug("port taken before the server bound it; retrying", "port", s.port)
			continue
		}
		return err
	}
}

func (s *Server) startProcess(ctx context.Context) error {
	fi, err := s.logFile.Stat()
	if err != nil {
		return fmt.Errorf("cannot stat server log: %w", err)
	}
	logStart := fi.Size()

	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(s.port),
		"unix_socket_directories": s.sockDir,
		"max_connections":         "300",
		"shared_buffers":          "128MB",
	}
	deathSignal := sigFastShutdown
	if !s.cfg.Persistent {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
		deathSignal = sigImmediateShutdown // nothing to keep; just go
	}
	maps.Copy(settings, s.cfg.Settings)
	args := []string{"-D", s.dataDir}
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", k+"="+settings[k])
	}

	// Not CommandContext: the server outlives ctx by design; Stop ends it.
	cmd := exec.Command(s.bins.postgres, args...)
	cmd.Dir = s.dataDir
	cmd.Env = childEnv()
	cmd.Stdout = s.logFile
	cmd.Stderr = s.logFile
	cmd.SysProcAttr = sysProcAttr(s.runAs, deathSignal)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", s.bins.postgres, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()

	err = waitReady(ctx, s.DSN("postgres"), p.exited)
	if err == nil {
		s.proc = p // Start has no Watch yet; Watch's restart holds mu
		return nil
	}
	select {
	case <-p.exited:
	default:
		_ = signalProcess(cmd.Process.Pid, sigImmediateShutdown)
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
	}
	logTail := s.logTail(logStart)
	if strings.Contains(logTail, "Address already in use") {
		err = fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return fmt.Errorf("server on port %d did not start: %w; server log tail:\n%s", s.port, err, logTail)
}

// waitReady polls with real connections until the server answers a query:
// pg_ctl's own readiness check only reads postmaster.pid.
func waitReady(ctx context.Context, dsn string, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		lastErr = ping(ctx, dsn)
		if lastErr == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("server exited during start-up")
		case <-ctx.Done():
			return fmt.Errorf("server not accepting connections: %w (last attempt: %w)", ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx)) // nothing to do about a failed goodbye
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("cannot release probe port: %w", err)
	}
	return port, nil
}

// childEnv drops libpq variables (PGDATA, PGPORT, PGOPTIONS, ...) that would
// otherwise silently change what initdb and postgres do.
func childEnv() []string {
	env := os.Environ()
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "PG") })
}

// logTail returns the end of the server log written since offset.
func (s *Server) logTail(offset int64) string {
	f, err := os.Open(filepath.Join(s.dataDir, logFileName))
	if err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	defer f.Close() // read-only
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > logTailBytes {
		offset = fi.Size() - logTailBytes
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read server log: %v)", err)
	}
	return string(b)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// sweepAbandoned deletes temporary clusters whose owning process died without
// Stop (a test binary killed by -timeout, say), so /tmp does not fill up with
// data dirs. The owner's flock on owner.lock is released by the kernel when it
// dies, so a lock we can take marks an abandoned dir; a dir without the file
// is still being set up and is left alone.
func sweepAbandoned(log *slog.Logger) {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	if err != nil {
		return // the pattern is constant and valid
	}
	for _, dir := range dirs {
		release, ok := tryLock(filepath.Join(dir, ownerLockName))
		if !ok {
			continue
		}
		err := os.RemoveAll(dir)
		release()
		if err != nil {
			log.Warn("cannot remove abandoned temporary cluster", "dir", dir, "err", err)
			continue
		}
		log.Info("removed abandoned temporary cluster", "dir", dir)
	}
}
