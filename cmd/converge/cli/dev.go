package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergeplane/converge/internal/demo"
	"github.com/convergeplane/converge/internal/embeddedpg"
)

func newDev(stdout io.Writer, getenv func(string) string) *cobra.Command {
	var (
		reset      bool
		demoName   string
		bom        string
		faultRate  float64
		readyAfter time.Duration
		pgPort     int
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "run everything on an embedded Postgres (kept in CONVERGE_DATA_DIR across restarts)",
		Long: `dev starts a PostgreSQL from this machine's server binaries in
CONVERGE_DATA_DIR (default ~/.cache/converge), migrates it, and runs the whole
control plane against it with dev-mode settings: the API listens on
127.0.0.1:8080 and /livez and /readyz on 127.0.0.1:8081 unless LISTEN_ADDR
and HEALTH_ADDR say otherwise, provider endpoints may be
loopback addresses (plain http allowed there; every other address is checked
as in production) and keys are generated and kept in the data dir. A
Postgres that dies is restarted (5 attempts); if it cannot be, dev exits 1.
With DATABASE_URL set it uses that database instead.

--demo also runs a demo: it starts an example provider (found next to
converge or on PATH; make build puts it in bin/), registers it, applies the
kinds, provider configs, reactor bindings and resources its objects command
prints, shows the root converge live, and then commands to try next.
--demo=classic (the default) runs classic-provider with the BOM --bom names
(--bom=updated converges the small one, then applies the updated one onto
it and lists what it removed and added) and --fault-rate transient
failures, with an S3-compatible store for its statussink reactor (this
machine's moto_server, else a minimal one in process); --demo=quickstart
runs quickstart-provider's five-resource site; --demo=unhealthy runs the
same site with quickstart-provider's cdn kind reporting not ready in its
health answer: the cdn parks, the reason shown, while the buckets converge,
and --ready-after later the demo makes cdn ready through the provider's
readiness switch and the site converges; --demo=datadriven runs stdprovider
serving the std kinds and applies a stdcel graph fanning out into
stdterraform modules (terraform must be on PATH), a stdstarlark program and
stdshell leaves, then an updated spec that prunes and adds children (the
modules and their state go in datadriven/ in the data dir). With --demo the terminal
keeps the live view: converge's log goes to converge.log in the data dir
(its last lines are shown on exit), the provider's and the store's to
files beside it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadDevConfig(getenv)
			if err != nil {
				return usageError{fmt.Errorf("bad configuration:\n%w", err)}
			}
			ctx := cmd.Context()
			env := demo.Env{Out: stdout, DataDir: cfg.DataDir, Getenv: getenv}
			if self, err := os.Executable(); err == nil {
				env.BinDir = filepath.Dir(self) // make build puts the providers and conctl next to converge
			}
			if len(cfg.AdminTokens) > 0 {
				env.Token = cfg.AdminTokens[0]
			}
			var d demo.Demo
			if demoName != "" { // fail before starting anything
				if d, err = demo.For(demoName, demo.Settings{BOM: bom, FaultRate: faultRate, ReadyAfter: readyAfter}); err != nil {
					return usageError{fmt.Errorf("demo: %w", err)}
				}
				if err := d.Check(env); err != nil {
					return fmt.Errorf("demo: %w", err)
				}
			}
			pgCfg := embeddedpg.Config{DataDir: filepath.Join(cfg.DataDir, "pg"), Port: pgPort, Persistent: true}
			if reset {
				// As root the cluster may live outside the data dir (see
				// embeddedpg.Config.ClusterDir); wipe it too.
				wipe := []string{cfg.DataDir}
				if dir, err := pgCfg.ClusterDir(); err == nil && dir != "" && dir != pgCfg.DataDir {
					wipe = append(wipe, dir)
				}
				for _, dir := range wipe {
					if err := os.RemoveAll(dir); err != nil {
						return fmt.Errorf("reset %s: %w", dir, err)
					}
					fmt.Fprintf(stdout, "wiped %s\n", dir)
				}
			}
			if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			log := cfg.NewLogger(os.Stderr)
			if demoName != "" {
				// The demo's terminal shows the live view: the logs go to a
				// file, its last lines shown on the way out.
				f, path, err := logFile(cfg.DataDir)
				if err != nil {
					return err
				}
				log = cfg.NewLogger(f)
				fmt.Fprintf(stdout, "logs: %s (its last lines are shown on exit; tail -f it to follow)\n", path)
				defer func() {
					f.Close()
					showTail(stdout, path, logTailLines)
				}()
			}
			pgCfg.Log = log
			var pgDied <-chan error // nil (never ready) without an embedded Postgres
			if cfg.DatabaseURL == "" {
				pg, err := embeddedpg.Start(ctx, pgCfg)
				if err != nil {
					return fmt.Errorf("embedded postgres: %w", err)
				}
				defer func() {
					sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if err := pg.Stop(sctx); err != nil {
						log.Error("stopping embedded postgres", "err", err)
					}
				}()
				// A postmaster that dies (OOM killer, kill -9) is restarted on
				// the same port, with bounded retries; meanwhile the API
				// answers 503 and the pool reconnects by itself.
				pgDied = pg.Watch(ctx, embeddedpg.WatchConfig{})
				cfg.DatabaseURL = pg.DSN("postgres")
				fmt.Fprintf(stdout, "embedded postgres: %s (data in %s)\n", cfg.DatabaseURL, pg.DataDir())
			}
			if err := devKeys(&cfg); err != nil {
				return err
			}
			s, err := Start(ctx, cfg, log)
			if err != nil {
				return err
			}
			base := "http://" + loopback(s.Addr())
			env.Base = base
			fmt.Fprintf(stdout, "converge is up\n  console: %s/\n  API:     %s/api/v1\n  docs:    %s/docs\n  OpenAPI: %s/openapi.json\n  try:     %s list kinds\n",
				base, base, base, base, demo.Conctl(env))
			if demoName != "" {
				stopDemo, err := demo.Run(ctx, d, env)
				defer stopDemo()
				if err != nil {
					s.Stop() //nolint:errcheck // reporting the demo error instead
					return fmt.Errorf("demo: %w", err)
				}
			}
			fmt.Fprintln(stdout, "press Ctrl+C to stop")
			for {
				select {
				case <-ctx.Done():
				case err := <-s.served:
					if err != nil {
						log.Error("http server stopped", "err", err)
					}
				case err, ok := <-pgDied:
					if !ok {
						pgDied = nil // Watch ended with ctx; keep waiting for it
						continue
					}
					log.Error("embedded postgres died and could not be restarted; stopping", "err", err)
					s.Stop() //nolint:errcheck // reporting the database error instead
					return fmt.Errorf("embedded postgres: %w", err)
				}
				return s.Stop()
			}
		},
	}
	cmd.Flags().BoolVar(&reset, "reset", false, "wipe the data dir (database and dev keys) first")
	cmd.Flags().StringVar(&demoName, "demo", "", "run a demo: "+strings.Join(demo.Names, ", ")+" (--demo alone: classic)")
	cmd.Flags().Lookup("demo").NoOptDefVal = "classic"
	cmd.Flags().StringVar(&bom, "bom", "small", "the classic demo's BOM: "+strings.Join(demo.BOMs, ", ")+" (the small one, then the updated one applied onto it)")
	cmd.Flags().Float64Var(&faultRate, "fault-rate", 0, "the classic demo providers' transient failure rate, 0 to below 1 (FAKE_FAULT_RATE)")
	cmd.Flags().DurationVar(&readyAfter, "ready-after", 10*time.Second, "the unhealthy demo: how long its cdn kind stays unready once the cdn parked")
	cmd.Flags().IntVar(&pgPort, "pg-port", 0, "port for the embedded Postgres (0 picks a free one)")
	return cmd
}

// logTailLines is how many of the log's last lines a demo shows on exit.
const logTailLines = 10

// logFile creates converge.log in dir (truncating an earlier run's) for the
// process's log.
func logFile(dir string) (*os.File, string, error) {
	path := filepath.Join(dir, "converge.log")
	f, err := os.Create(path)
	if err != nil {
		return nil, "", fmt.Errorf("log file: %w", err)
	}
	return f, path, nil
}

// showTail prints the last n lines of the log at path to w.
func showTail(w io.Writer, path string, n int) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintf(w, "cannot show the log: %v\n", err)
		return
	}
	defer f.Close()
	const window = 64 << 10 // n lines of a text log fit well within it
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		if _, err := f.Seek(-window, io.SeekEnd); err != nil {
			fmt.Fprintf(w, "cannot show the log: %v\n", err)
			return
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		fmt.Fprintf(w, "cannot show the log: %v\n", err)
		return
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	fmt.Fprintf(w, "\nthe last %d lines of %s:\n%s\n", len(lines), path, strings.Join(lines, "\n"))
}

// DevListenAddrDefault and DevHealthAddrDefault are where `converge dev`
// serves when LISTEN_ADDR and HEALTH_ADDR are unset: loopback only, since a
// dev server's API is open (no tokens).
const (
	DevListenAddrDefault = "127.0.0.1:8080"
	DevHealthAddrDefault = "127.0.0.1:8081"
)

// loadDevConfig is LoadConfig with dev mode's settings: Dev set, and the API
// and probes bound to loopback unless LISTEN_ADDR and HEALTH_ADDR say
// otherwise.
func loadDevConfig(getenv func(string) string) (Config, error) {
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return cfg, err
	}
	cfg.Dev = true
	if getenv("LISTEN_ADDR") == "" {
		cfg.ListenAddr = DevListenAddrDefault
	}
	if getenv("HEALTH_ADDR") == "" {
		cfg.HealthAddr = DevHealthAddrDefault
	}
	return cfg, nil
}

// devKeys fills missing dispatch keys from files in the data dir, creating
// them on first use, so endpoints registered in one dev session still
// verify in the next.
func devKeys(cfg *Config) error {
	load := func(name string, n int) ([]byte, error) {
		p := filepath.Join(cfg.DataDir, name)
		if b, err := os.ReadFile(p); err == nil {
			return base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		k := make([]byte, n)
		if _, err := rand.Read(k); err != nil {
			return nil, err
		}
		return k, os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k)), 0o600)
	}
	var err error
	if cfg.SecretKey == nil {
		if cfg.SecretKey, err = load("secret.key", 32); err != nil {
			return fmt.Errorf("dev secret key: %w", err)
		}
	}
	if cfg.CallbackKey == nil {
		if cfg.CallbackKey, err = load("callback.key", 32); err != nil {
			return fmt.Errorf("dev callback key: %w", err)
		}
	}
	return nil
}

// loopback turns ":8080" or "[::]:8080" into "127.0.0.1:8080" for display.
func loopback(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	if strings.HasPrefix(addr, "[::]:") {
		return "127.0.0.1" + strings.TrimPrefix(addr, "[::]")
	}
	if strings.HasPrefix(addr, "0.0.0.0:") {
		return "127.0.0.1" + strings.TrimPrefix(addr, "0.0.0.0")
	}
	return addr
}
