package cli

import (
	"encoding/json"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) configCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Manage conctl's contexts (named servers and their tokens)",
		Long: `Config edits conctl's config file: named contexts, each a server URL, a
token or a token command, a CA file and a namespace, one of them current. The file is
$` + EnvConfig + `, else $XDG_CONFIG_HOME/converge/config.yaml, else
~/.config/converge/config.yaml; conctl writes it with mode 0600.

A flag wins over the environment ($` + EnvServer + `, $` + EnvToken + `, $` + EnvNamespace + `), which wins
over the context (--context NAME, else the current one), which wins over
the defaults.`,
		Example: `  conctl config set-context prod --server https://converge.example.com --token-command 'pass show converge/prod' --current
  conctl config set-context local --server http://localhost:8080
  conctl config set-context team-a --server https://converge.example.com --namespace team-a
  conctl config get-contexts
  conctl config use-context local
  conctl --context prod list resources`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownSubcommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.setContextCommand(), a.useContextCommand(), a.getContextsCommand(),
		a.currentContextCommand(), a.deleteContextCommand())
	return cmd
}

func (a *app) setContextCommand() *cobra.Command {
	var (
		c       Context
		current bool
	)
	cmd := &cobra.Command{
		Use:   "set-context NAME",
		Short: "Create a context, or change the fields given of an existing one",
		Long: `Set-context creates the context NAME, or changes only the fields whose
flags are given. --token and --token-command exclude each other: setting
one clears the other; an empty value clears a field.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := loadConfig(a.getenv)
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			if fl.Changed("token") && fl.Changed("token-command") {
				return usagef("--token and --token-command exclude each other")
			}
			if fl.Changed("namespace") && c.Namespace != "" {
				if err := checkNamespace(c.Namespace, "--namespace"); err != nil {
					return err
				}
			}
			if fl.Changed("server") && c.Server != "" {
				if _, err := NewClient(ClientConfig{Server: c.Server}); err != nil {
					return usagef("--server: %v", err)
				}
			}
			ctx, ok := f.find(args[0])
			if !ok {
				f.cfg.Contexts = append(f.cfg.Contexts, Context{Name: args[0]})
				ctx = &f.cfg.Contexts[len(f.cfg.Contexts)-1]
			}
			if fl.Changed("server") {
				ctx.Server = c.Server
			}
			if fl.Changed("token") {
				ctx.Token, ctx.TokenCommand = c.Token, ""
			}
			if fl.Changed("token-command") {
				ctx.Token, ctx.TokenCommand = "", c.TokenCommand
			}
			if fl.Changed("certificate-authority") {
				ctx.CertificateAuthority = c.CertificateAuthority
			}
			if fl.Changed("namespace") {
				ctx.Namespace = c.Namespace
			}
			if current {
				f.cfg.CurrentContext = args[0]
			}
			if err := f.save(); err != nil {
				return err
			}
			verb := "modified"
			if !ok {
				verb = "created"
			}
			fmt.Fprintf(a.stdout, "context %q %s in %s\n", args[0], verb, f.path)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&c.Server, "server", "", "the server's URL")
	fl.StringVar(&c.Token, "token", "", "the bearer token (stored in the file)")
	fl.StringVar(&c.TokenCommand, "token-command", "", "a command, run by /bin/sh -c, that prints the token (run once per conctl invocation that calls the API)")
	fl.StringVar(&c.CertificateAuthority, "certificate-authority", "", "a PEM file of the CAs to trust for an https server")
	fl.StringVarP(&c.Namespace, "namespace", "n", "", "the namespace its commands address when neither -n nor $"+EnvNamespace+" names one")
	fl.BoolVar(&current, "current", false, "also make it the current context")
	return cmd
}

func (a *app) useContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "use-context NAME",
		Short: "Make a context the current one",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := loadConfig(a.getenv)
			if err != nil {
				return err
			}
			if _, ok := f.find(args[0]); !ok {
				return fmt.Errorf("no context %q in %s (conctl config get-contexts lists them)", args[0], f.path)
			}
			f.cfg.CurrentContext = args[0]
			if err := f.save(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "Switched to context %q.\n", args[0])
			return nil
		},
	}
}

func (a *app) currentContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "current-context",
		Short: "Print the current context's name",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := loadConfig(a.getenv)
			if err != nil {
				return err
			}
			if f.cfg.CurrentContext == "" {
				return fmt.Errorf("no current context in %s (conctl config use-context NAME sets one)", f.path)
			}
			fmt.Fprintln(a.stdout, f.cfg.CurrentContext)
			return nil
		},
	}
}

func (a *app) deleteContextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete-context NAME",
		Short: "Delete a context (the current one too: then none is current)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := loadConfig(a.getenv)
			if err != nil {
				return err
			}
			if _, ok := f.find(args[0]); !ok {
				return fmt.Errorf("no context %q in %s", args[0], f.path)
			}
			f.cfg.Contexts = slices.DeleteFunc(f.cfg.Contexts, func(c Context) bool { return c.Name == args[0] })
			if f.cfg.CurrentContext == args[0] {
				f.cfg.CurrentContext = ""
			}
			if err := f.save(); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "context %q deleted from %s\n", args[0], f.path)
			return nil
		},
	}
}

// contextView is a context as get-contexts shows it: never its token.
type contextView struct {
	Name                 string `json:"name"`
	Current              bool   `json:"current"`
	Server               string `json:"server,omitempty"`
	Auth                 string `json:"auth"`
	CertificateAuthority string `json:"certificate_authority,omitempty"`
	Namespace            string `json:"namespace,omitempty"`
}

func (a *app) getContextsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get-contexts",
		Short: "List the contexts (tokens are never printed)",
		Long: `Get-contexts lists the contexts: a table of CURRENT (*), NAME, SERVER,
AUTH (token, token-command or none), CA and NAMESPACE, or with -o json or -o yaml
{"items": [...]}. Tokens are never printed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			f, err := loadConfig(a.getenv)
			if err != nil {
				return err
			}
			views := make([]contextView, len(f.cfg.Contexts))
			for i, c := range f.cfg.Contexts {
				auth := "none"
				switch {
				case c.Token != "":
					auth = "token"
				case c.TokenCommand != "":
					auth = "token-command"
				}
				views[i] = contextView{Name: c.Name, Current: c.Name == f.cfg.CurrentContext, Server: c.Server,
					Auth: auth, CertificateAuthority: c.CertificateAuthority, Namespace: c.Namespace}
			}
			if p.format != outputTable {
				body, err := json.Marshal(map[string]any{"items": views})
				if err != nil {
					return err
				}
				return p.stream(body, true)
			}
			if len(views) == 0 {
				fmt.Fprintf(a.stderr, "No contexts in %s.\n", f.path)
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tSERVER\tAUTH\tCA\tNAMESPACE")
			for _, v := range views {
				cur := ""
				if v.Current {
					cur = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cur, v.Name, cell(v.Server), v.Auth, cell(v.CertificateAuthority),
					cmpOrText(v.Namespace, NamespaceDefault))
			}
			return tw.Flush()
		},
	}
}
