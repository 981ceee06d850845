package cli

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) deleteCommand() *cobra.Command {
	cmd := typeGroup("delete", "Delete objects",
		`Delete removes objects by name and prints one line per object. Deleting a
resource marks it for deletion (the server answers 202 and tears it down
through its finalizers; the line says "deletion requested"); conctl then
waits until it is gone, showing how many resources beneath it remain and
what blocks the teardown, and prints "deleted". --wait=false returns at
once; --timeout bounds the wait.

Several names may be given; a failure is reported and the rest are still
deleted, with exit status 1.`)
	cmd.Aliases = []string{"rm"}
	cmd.Example = `  conctl delete resource vpc/sample-vpc
  conctl delete resource --kind vpc sample-a sample-b --timeout 2m
  conctl delete resource account/team-a --wait=false
  conctl delete manifest vpc --kind-version 1
  conctl delete pc vpc-v1-payments
  conctl delete resource vpc/sample-vpc -n team-a
  conctl delete namespace team-a`

	// resources
	{
		var (
			kind    string
			wait    bool
			timeout time.Duration
		)
		c := &cobra.Command{
			Use:     "resource KIND/NAME...",
			Aliases: typeResource.aliases,
			Short:   "Delete resources (KIND/NAME, or NAMEs with --kind) and wait until they are gone",
			Args:    minArgs(1, "KIND/NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := validWaitTimeout(timeout); err != nil {
					return err
				}
				targets, err := resourceTargets(kind, args)
				if err != nil {
					return err
				}
				c, err := a.api()
				if err != nil {
					return err
				}
				requested, err := a.delete(cmd.Context(), targets)
				if !wait || len(requested) == 0 {
					return err
				}
				werr := a.awaitResources(cmd.Context(), c, requested, timeout, condDeleted)
				if err == nil {
					return werr
				}
				if werr != nil {
					a.printError(cmd, werr)
				}
				return err
			},
		}
		c.Flags().StringVar(&kind, "kind", "", "the resources' kind (then NAMEs alone)")
		c.Flags().BoolVar(&wait, "wait", true, "wait until the resources are gone (--wait=false: return once requested)")
		waitTimeout(c, &timeout, "for the teardown")
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
				var targets []target
				for _, k := range args {
					targets = append(targets, target{
						id:   typeManifest.name + "/" + k + "/v" + kv.String(),
						path: "/kinds/" + seg(k) + "/versions/" + kv.String() + "/manifest",
					})
				}
				_, err := a.delete(cmd.Context(), targets)
				return err
			},
		}
		kv.register(c, "the kind version to delete (required)")
		cmd.AddCommand(c)
	}
	// by name
	for _, t := range []*objectType{typeProviderConfig, typeReactorBinding, typeEndpoint, typeAlertSink, typeRoleBinding, typeNamespace} {
		cmd.AddCommand(&cobra.Command{
			Use:     t.name + " NAME...",
			Aliases: t.aliases,
			Short:   "Delete " + t.plural + " by name",
			Args:    minArgs(1, "NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				var targets []target
				for _, n := range args {
					targets = append(targets, target{
						id:   t.name + "/" + n,
						path: collectionPath(t) + "/" + seg(n),
					})
				}
				_, err := a.delete(cmd.Context(), targets)
				return err
			},
		})
	}
	return cmd
}

// target is one object a command addresses.
type target struct {
	id   string // for output: "resource/vpc/sample"
	path string
}

// delete requests each target's deletion and returns those the server
// accepted.
func (a *app) delete(ctx context.Context, targets []target) ([]target, error) {
	c, err := a.api()
	if err != nil {
		return nil, err
	}
	if len(targets) == 1 {
		// One object: let Run print the error plainly.
		resp, err := c.Do(ctx, http.MethodDelete, targets[0].path, nil, nil)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(a.stdout, "%s %s\n", targets[0].id, deleteResult(resp))
		return targets, nil
	}
	var done []target
	for _, t := range targets {
		resp, err := c.Do(ctx, http.MethodDelete, t.path, nil, nil)
		if err != nil {
			writeError(a.stderr, t.id, err)
			continue
		}
		fmt.Fprintf(a.stdout, "%s %s\n", t.id, deleteResult(resp))
		done = append(done, t)
	}
	if failed := len(targets) - len(done); failed > 0 {
		fmt.Fprintf(a.stderr, "Error: %d of %d deletes failed\n", failed, len(targets))
		return done, &reportedError{fmt.Errorf("%d of %d deletes failed", failed, len(targets))}
	}
	return done, nil
}

func deleteResult(resp *Response) string {
	if resp.StatusCode == http.StatusAccepted {
		return "deletion requested"
	}
	return "deleted"
}
