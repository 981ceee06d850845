package cli

import (
	"context"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
)

func (a *app) deleteCommand() *cobra.Command {
	cmd := typeGroup("delete", "Delete objects",
		`Delete removes objects by name and prints one line per object. Deleting a
resource marks it for deletion (the server answers 202 and tears it down
through its finalizers); the line then says "deletion requested".

Several names may be given; a failure is reported and the rest are still
deleted, with exit status 1.`)
	cmd.Aliases = []string{"rm"}
	cmd.Example = `  conctl delete resource vpc/sample-vpc
  conctl delete resource --kind vpc sample-a sample-b
  conctl delete manifest vpc --kind-version 1
  conctl delete pc vpc-v1-payments`

	// resources
	{
		var kind string
		c := &cobra.Command{
			Use:     "resource KIND/NAME...",
			Aliases: typeResource.aliases,
			Short:   "Delete resources (KIND/NAME, or NAMEs with --kind)",
			Args:    minArgs(1, "KIND/NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				var targets []deleteTarget
				for _, arg := range args {
					k, n, err := resourceRef(kind, arg)
					if err != nil {
						return err
					}
					targets = append(targets, deleteTarget{
						id:   typeResource.name + "/" + k + "/" + n,
						path: "/resources/" + seg(k) + "/" + seg(n),
					})
				}
				return a.delete(cmd.Context(), targets)
			},
		}
		c.Flags().StringVar(&kind, "kind", "", "the resources' kind (then NAMEs alone)")
		cmd.AddCommand(c)
	}
	// manifests
	{
		var kv kindVersionOpt
		c := &cobra.Command{
			Use:     "manifest KIND... --kind-version N",
			Aliases: typeManifest.aliases,
			Short:   "Delete kind manifests (--kind-version is required)",
			Args:    minArgs(1, "KIND"),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := kv.validate(true); err != nil {
					return err
				}
				var targets []deleteTarget
				for _, k := range args {
					targets = append(targets, deleteTarget{
						id:   typeManifest.name + "/" + k + "/v" + kv.String(),
						path: "/kinds/" + seg(k) + "/versions/" + kv.String() + "/manifest",
					})
				}
				return a.delete(cmd.Context(), targets)
			},
		}
		kv.register(c, "the kind version to delete (required)")
		cmd.AddCommand(c)
	}
	// by name
	for _, t := range []*objectType{typeProviderConfig, typeReactorBinding, typeEndpoint} {
		cmd.AddCommand(&cobra.Command{
			Use:     t.name + " NAME...",
			Aliases: t.aliases,
			Short:   "Delete " + t.plural + " by name",
			Args:    minArgs(1, "NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				var targets []deleteTarget
				for _, n := range args {
					targets = append(targets, deleteTarget{
						id:   t.name + "/" + n,
						path: collectionPath(t) + "/" + seg(n),
					})
				}
				return a.delete(cmd.Context(), targets)
			},
		})
	}
	return cmd
}

type deleteTarget struct {
	id   string // for output: "resource/vpc/sample"
	path string
}

func (a *app) delete(ctx context.Context, targets []deleteTarget) error {
	c, err := a.api()
	if err != nil {
		return err
	}
	if len(targets) == 1 {
		// One object: let Run print the error plainly.
		resp, err := c.Do(ctx, http.MethodDelete, targets[0].path, nil, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s %s\n", targets[0].id, deleteResult(resp))
		return nil
	}
	failed := 0
	for _, t := range targets {
		resp, err := c.Do(ctx, http.MethodDelete, t.path, nil, nil)
		if err != nil {
			failed++
			writeError(a.stderr, t.id, err)
			continue
		}
		fmt.Fprintf(a.stdout, "%s %s\n", t.id, deleteResult(resp))
	}
	if failed > 0 {
		fmt.Fprintf(a.stderr, "Error: %d of %d deletes failed\n", failed, len(targets))
		return &reportedError{fmt.Errorf("%d of %d deletes failed", failed, len(targets))}
	}
	return nil
}

func deleteResult(resp *Response) string {
	if resp.StatusCode == http.StatusAccepted {
		return "deletion requested"
	}
	return "deleted"
}
