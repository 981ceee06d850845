package cli

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
)

func (a *app) rotateSecretCommand() *cobra.Command {
	cmd := typeGroup("rotate-secret", "Issue a new signing secret",
		`Rotate-secret asks the server for a new signing secret for an endpoint
(POST /api/v1/endpoints/{name}/rotate-secret) and prints it once. During the
grace window the server signs with both the old and the new secret.`)
	cmd.Example = `  conctl rotate-secret endpoint networking`
	cmd.AddCommand(&cobra.Command{
		Use:     "endpoint NAME",
		Aliases: typeEndpoint.aliases,
		Short:   "Rotate an endpoint's signing secret",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, p, err := a.session()
			if err != nil {
				return err
			}
			path := "/endpoints/" + seg(args[0]) + "/rotate-secret"
			resp, err := c.Do(cmd.Context(), http.MethodPost, path, nil, nil)
			if err != nil {
				return err
			}
			id := typeEndpoint.name + "/" + args[0]
			if p.format == outputTable {
				fmt.Fprintf(a.stdout, "%s secret rotated\n", id)
			} else if err := p.stream(resp.Body, true); err != nil {
				return err
			}
			a.showSecret(p, id, resp.Body)
			return nil
		},
	})
	return cmd
}
