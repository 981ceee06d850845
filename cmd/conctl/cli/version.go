package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"

	"github.com/spf13/cobra"
)

func (a *app) versionCommand() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the client and server versions",
		Long: `Version prints conctl's version and the server's (GET /api/v1/version).
With -o json or -o yaml it prints {"client": {...}, "server": <the server's answer>}.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := a.printer()
			if err != nil {
				return err
			}
			client := map[string]string{"version": clientVersion(), "go_version": runtime.Version()}
			if clientOnly {
				return a.printVersion(p, client, nil, "")
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			resp, err := c.Do(cmd.Context(), http.MethodGet, "/version", nil, nil)
			if err != nil {
				if p.format == outputTable {
					_ = a.printVersion(p, client, nil, "")
				}
				return err
			}
			return a.printVersion(p, client, resp.Body, c.Server())
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "show only the client version (no server call)")
	return cmd
}

func (a *app) printVersion(p *printer, client map[string]string, server json.RawMessage, serverURL string) error {
	if p.format != outputTable {
		v := map[string]any{"client": client}
		if server != nil {
			v["server"] = server
		}
		body, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return p.stream(body, true)
	}
	fmt.Fprintf(a.stdout, "Client Version: %s (%s)\n", client["version"], client["go_version"])
	if server == nil {
		return nil
	}
	fmt.Fprintf(a.stdout, "Server Version: %s\n", serverVersion(server))
	fmt.Fprintf(a.stdout, "Server:         %s\n", serverURL)
	return nil
}

// serverVersion extracts a readable version from the server's answer: its
// "version" field (with "commit" when present), else the answer itself.
func serverVersion(body json.RawMessage) string {
	o, err := decodeObject(body)
	if err != nil {
		return string(body)
	}
	v := o.str("version")
	if v == "" {
		b, _ := json.Marshal(o)
		return string(b)
	}
	if commit := o.str("commit"); commit != "" {
		v += " (commit " + commit + ")"
	}
	return v
}
