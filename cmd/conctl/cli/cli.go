// Package cli implements conctl, the command-line client of the converge REST
// API. Every command writes to injected writers and reads the environment
// through an injected getenv, so the whole CLI runs in tests; cmd/conctl's
// main only calls Run and exits with its status.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergeplane/converge/internal/version"
)

// Exit statuses returned by Run.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // the request failed: server error, unreachable server, bad input file
	ExitUsage   = 2 // the command line is wrong
)

// Defaults and environment variables of the global flags.
const (
	ServerDefault  = "http://localhost:8080"
	TimeoutDefault = 30 * time.Second
	RetriesDefault = 2
	EnvServer      = "CONVERGE_SERVER"
	EnvToken       = "CONVERGE_TOKEN"
	EnvNamespace   = "CONVERGE_NAMESPACE"
	// NamespaceDefault is the namespace of a command that names none (by
	// -n, $CONVERGE_NAMESPACE or the context's namespace).
	NamespaceDefault = "default"
)

// Run builds the CLI, runs it with args (without the program name) and
// returns the exit status: ExitOK, ExitFailure or ExitUsage. Errors are
// written to stderr. stdin feeds "apply -f -".
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return run(ctx, args, stdin, stdout, stderr, getenv, time.Now)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer,
	getenv func(string) string, now func() time.Time,
) int {
	a := newApp(stdout, stderr, getenv)
	a.now = now
	root := a.command()
	root.SetArgs(args)
	if stdin != nil {
		root.SetIn(stdin)
	}
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	a.printError(cmd, err)
	return ExitStatus(err)
}

// New returns the conctl root command writing to stdout and stderr and
// reading $CONVERGE_SERVER and $CONVERGE_TOKEN through getenv. Its Execute
// returns the first error unprinted; ExitStatus maps it to an exit status.
// Most callers want Run instead.
func New(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	return newApp(stdout, stderr, getenv).command()
}

// ExitStatus maps an error returned by the CLI to an exit status.
func ExitStatus(err error) int {
	var (
		ue *usageError
		xe *exitError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &xe):
		return xe.code
	case errors.As(err, &ue):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// usageError is a wrong command line; it exits ExitUsage.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// reportedError has already been written to stderr.
type reportedError struct{ err error }

func (e *reportedError) Error() string { return e.err.Error() }
func (e *reportedError) Unwrap() error { return e.err }

// app holds what every command shares: the writers, the environment and the
// global flags.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	now            func() time.Time

	// global flags
	server      string
	token       string
	contextName string
	caFile      string
	// namespace is -n; allNamespaces is list's and get's -A.
	namespace     string
	allNamespaces bool
	// nsExplicit names what chose the namespace, -n or
	// $CONVERGE_NAMESPACE; "" when the context or the default did.
	nsExplicit string
	output     string
	// objectOutput: the command prints objects in any of objectFormats
	// (get, list), not only in outputFormats.
	objectOutput bool
	// watch is get's and list's --watch.
	watch   bool
	timeout time.Duration
	retries int

	client *Client // built on first use by api()
}

func newApp(stdout, stderr io.Writer, getenv func(string) string) *app {
	if getenv == nil {
		getenv = os.Getenv
	}
	return &app{stdout: stdout, stderr: stderr, getenv: getenv, now: time.Now}
}

func (a *app) command() *cobra.Command {
	root := &cobra.Command{
		Use:   "conctl",
		Short: "conctl drives a converge control plane through its REST API",
		Long: `conctl drives a converge control plane through its REST API.

It applies kind manifests, resources, provider configs, reactor bindings,
endpoints and per-version kind configs from JSON or YAML files, and gets,
lists and deletes them. It operates resources: waits for them, quarantines,
reconciles, invokes their verbs and rolls back their specs. It reads the
delivery log and replays a delivery's task. It writes a kind's types in Go,
TypeScript or Python for a provider's handler.

Resources, provider configs, reactor bindings and endpoints live in a
namespace: -n names it (else $CONVERGE_NAMESPACE, else the context's, else
default); list -A spans every namespace.

Exit status: 0 on success, 1 when anything failed, 2 on a usage error.`,
		Example: `  conctl apply --type manifest -f account.kind.json
  conctl apply -f resources.yaml
  conctl get resource vpc/sample-vpc
  conctl get manifest vpc --kind-version 2
  conctl list resources --kind vpc --phase Failed --phase Degraded
  conctl delete resource vpc/sample-vpc --timeout 5m
  conctl op vpc/sample-vpc snapshot --input '{"label": "nightly"}' --wait
  conctl describe resource vpc/sample-vpc
  conctl list resources -n team-a
  conctl list resources -A
  conctl config set-context prod --server https://converge.example.com --token-command 'pass show converge/prod' --current`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownSubcommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })

	f := root.PersistentFlags()
	f.StringVar(&a.server, "server", "", "converge server URL (default $"+EnvServer+", else the context's, else "+ServerDefault+")")
	f.StringVar(&a.token, "token", "", "bearer token for the API (default $"+EnvToken+", else the context's)")
	f.StringVar(&a.contextName, "context", "", "the config file's context to use (default its current-context; see conctl config)")
	f.StringVarP(&a.namespace, "namespace", "n", "", "the namespace of namespaced objects (default $"+EnvNamespace+", else the context's, else "+NamespaceDefault+")")
	f.StringVar(&a.caFile, "certificate-authority", "", "a PEM file of the CAs to trust for an https server (default the context's, else the system's)")
	f.StringVarP(&a.output, "output", "o", outputTable, "output format: "+strings.Join(outputFormats, "|")+
		"; get, list, describe and deliveries also take wide|name|jsonpath=TEMPLATE|go-template=TEMPLATE")
	f.DurationVar(&a.timeout, "timeout", TimeoutDefault, "timeout of each HTTP request (0 for none)")
	f.IntVar(&a.retries, "retries", RetriesDefault, "how many times a request that failed in transit or got 429/502/503/504 is sent again "+
		"(a POST's retries reuse its Idempotency-Key, so it never runs twice)")

	root.AddCommand(
		a.applyCommand(),
		a.diffCommand(),
		a.getCommand(),
		a.listCommand(),
		a.deleteCommand(),
		a.waitCommand(),
		a.watchCommand(),
		a.reconcileCommand(),
		a.opCommand(),
		a.opsCommand(),
		a.historyCommand(),
		a.rollbackCommand(),
		a.rotateSecretCommand(),
		a.deliveriesCommand(),
		a.replayCommand(),
		a.auditCommand(),
		a.genTypesCommand(),
		a.versionCommand(),
		a.configCommand(),
		a.describeCommand(),
		a.createCommand(),
	)
	root.AddCommand(a.quarantineCommands()...)
	a.addCompletions(root)
	return root
}

// validate checks the global flags. Commands call it through api() or
// printer() so that `conctl help` works whatever the environment says.
func (a *app) validate() error {
	format, _, err := parseOutput(a.output)
	if err != nil {
		return err
	}
	if !a.objectOutput && !slices.Contains(outputFormats, format) {
		return usagef("invalid --output %q: this command prints %s; %s print the others", a.output,
			strings.Join(outputFormats, ", "), "get, list, describe and deliveries")
	}
	if a.timeout < 0 {
		return usagef("invalid --timeout %s: must not be negative", a.timeout)
	}
	if a.retries < 0 {
		return usagef("invalid --retries %d: must not be negative", a.retries)
	}
	return nil
}

// api returns the API client, building it from the flags, the environment
// and the config file's context, in that order of precedence.
func (a *app) api() (*Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	cfg, origin, err := a.clientConfig()
	if err != nil {
		return nil, err
	}
	c, err := NewClient(cfg)
	if err != nil {
		return nil, usagef("%s: %w", origin, err)
	}
	a.client = c
	return c, nil
}

// session returns what most commands need: the API client and the output
// printer.
func (a *app) session() (*Client, *printer, error) {
	c, err := a.api()
	if err != nil {
		return nil, nil, err
	}
	p, err := a.printer()
	if err != nil {
		return nil, nil, err
	}
	return c, p, nil
}

// printer returns the output printer for -o.
func (a *app) printer() (*printer, error) {
	if err := a.validate(); err != nil {
		return nil, err
	}
	format, tmpl, err := parseOutput(a.output)
	if err != nil {
		return nil, err
	}
	return &printer{format: format, tmpl: tmpl, w: a.stdout, now: a.now, allNamespaces: a.allNamespaces}, nil
}

// printError writes err to stderr: a usage hint for usage errors, the
// problem detail and field errors for API errors.
func (a *app) printError(cmd *cobra.Command, err error) {
	var re *reportedError
	if errors.As(err, &re) {
		return
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(a.stderr, "Error: interrupted")
		return
	}
	writeError(a.stderr, "", err)
	var ue *usageError
	if errors.As(err, &ue) && cmd != nil {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
}

// writeError prints "Error: [what: ]<err>" and, for an API error, each field
// error on its own line as "  - <location>: <message>" — unless the detail
// already says the only one (location and message), which would print the
// same words twice.
func writeError(w io.Writer, what string, err error) {
	prefix := "Error: "
	if what != "" {
		prefix += what + ": "
	}
	fmt.Fprintf(w, "%s%s\n", prefix, err)
	var ae *APIError
	if !errors.As(err, &ae) {
		return
	}
	errs := ae.Errors
	if len(errs) == 1 && strings.Contains(ae.Detail, errs[0].Location) && strings.Contains(ae.Detail, errs[0].Message) {
		errs = nil
	}
	for _, fe := range errs {
		switch {
		case fe.Location != "" && fe.Message != "":
			fmt.Fprintf(w, "  - %s: %s\n", fe.Location, fe.Message)
		case fe.Message != "":
			fmt.Fprintf(w, "  - %s\n", fe.Message)
		case fe.Location != "":
			fmt.Fprintf(w, "  - %s\n", fe.Location)
		}
	}
	switch {
	case ae.StatusCode == 401 || ae.StatusCode == 403:
		fmt.Fprintf(w, "  (check --token or $%s)\n", EnvToken)
	case ae.Type == problemVersionConflict || ae.Type == problemPreconditionFailed:
		fmt.Fprintf(w, "  (it changed since that version was read: get it again and redo the change, or apply with --force to overwrite it)\n")
	}
}

// unknownSubcommand is the usage error for `conctl <group> <unknown>`.
func unknownSubcommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown %s %q for %q", argKind(cmd), name, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return &usageError{errors.New(msg)}
}

func argKind(cmd *cobra.Command) string {
	if cmd.HasParent() {
		return "type"
	}
	return "command"
}

// typeGroup is a verb (get, list, delete) whose subcommands are object types.
func typeGroup(use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   use + " TYPE",
		Short: short,
		Long:  long,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("missing TYPE; one of: %s", subcommandNames(cmd))
			}
			return unknownSubcommand(cmd, args[0])
		},
	}
}

func subcommandNames(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

// exactArgs is cobra.ExactArgs returning a usage error naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return usagef("missing %s", names)
		case len(args) > n:
			return usagef("too many arguments %q: want %s", args[n:], names)
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs returning a usage error.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("missing %s", names)
		}
		return nil
	}
}

// noArgs is cobra.NoArgs returning a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// clientVersion is the version the linker stamped into internal/version
// (make build stamps git describe's), else the module version or VCS
// revision from the build info, else "dev".
func clientVersion() string {
	if version.Version != version.Unstamped {
		return version.Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 && (v == "" || v == "(devel)") {
				v = "dev-" + s.Value[:12]
			}
		}
		if v != "" && v != "(devel)" {
			return v
		}
	}
	return "dev"
}
