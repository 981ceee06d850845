// Package cli is the converge server's command line: with no subcommand it
// serves; the subcommands are migrate, dev and version. main only calls Run and exits with its status.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/convergeplane/converge/internal/version"
	"github.com/convergeplane/converge/migrations"
)

// Run executes the command line and returns the process exit status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRoot(stdout, stderr, getenv)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "converge:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

func newRoot(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:   "converge",
		Short: "Converge: a Postgres-backed declarative control plane that pushes work to webhook providers",
		Long: `converge runs the control plane. With no subcommand it serves: the duties
are chosen by ROLE (all, control, dispatch) and configured from the
environment (see docs/operations.md).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := LoadConfig(getenv)
			if err != nil {
				return usageError{fmt.Errorf("bad configuration:\n%w", err)}
			}
			if cfg.DatabaseURL == "" {
				return usageError{errors.New("DATABASE_URL is required (or run `converge dev` for an embedded Postgres)")}
			}
			return Serve(cmd.Context(), cfg, cfg.NewLogger(os.Stderr), stdout)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newMigrate(stdout, getenv), newDev(stdout, getenv), &cobra.Command{
		Use:   "version",
		Short: "print the build version",
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(stdout, version.Version) },
	})
	return root
}

func newMigrate(stdout io.Writer, getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate up|down|status",
		Short: "apply, roll back (one step) or show database migrations",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dsn := getenv("DATABASE_URL")
			if dsn == "" {
				return usageError{errors.New("DATABASE_URL is required")}
			}
			cfg, err := LoadConfig(getenv)
			if err != nil {
				return usageError{fmt.Errorf("bad configuration:\n%w", err)}
			}
			log := cfg.NewLogger(os.Stderr)
			switch args[0] {
			case "up":
				return migrations.Up(cmd.Context(), dsn, log)
			case "down":
				return migrations.Down(cmd.Context(), dsn)
			case "status":
				return migrations.Status(cmd.Context(), dsn, stdout)
			}
			return usageError{fmt.Errorf("unknown migrate command %q: want up, down or status", args[0])}
		},
	}
	return cmd
}
