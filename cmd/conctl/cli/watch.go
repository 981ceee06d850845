package cli

import (
	"context"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/convergeplane/converge/internal/watchview"
)

// watchInterval is how often a watch reads the subtree again: a graph read
// of a large composite is one query, but thousands of rows.
const watchInterval = time.Second

func (a *app) watchCommand() *cobra.Command {
	cmd := typeGroup("watch", "Watch a composite converge",
		`Watch shows a resource's owned subtree live: its children's phases tallied,
a progress bar of those Ready, and the slowest or failing children (a
last_error first, then those unchanged longest), each with when its next
attempt is due (or that it runs) and the dependency it waits for. On a
terminal the view is redrawn in place; elsewhere a line is printed each
time the tally changes.
It exits 0 once the resource is Ready (--follow keeps watching), 1 if
--timeout elapses first.`)
	cmd.Example = `  conctl watch resource classicbom/classic
  conctl watch resource classicbom/classic --timeout 10m
  conctl watch resource site/shop --follow`

	var (
		timeout  time.Duration
		follow   bool
		laggards int
	)
	c := &cobra.Command{
		Use:     "resource KIND/NAME",
		Aliases: typeResource.aliases,
		Short:   "Watch a resource's subtree until it is Ready",
		Args:    exactArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validWaitTimeout(timeout); err != nil {
				return err
			}
			if laggards < 0 {
				return usagef("invalid --show %d: must not be negative", laggards)
			}
			kind, name, err := resourceRef("", args[0])
			if err != nil {
				return err
			}
			c, err := a.api()
			if err != nil {
				return err
			}
			width := 80
			if n, err := strconv.Atoi(a.getenv("COLUMNS")); err == nil && n > 20 {
				width = n
			}
			src := watchview.Source{Kind: kind, Name: name, Now: a.now,
				Get: func(ctx context.Context, path string) ([]byte, error) { return c.Get(ctx, path, nil) }}
			// Consistent: it exits once the resource is Ready, which a
			// replica could still report of the previous generation.
			_, err = watchview.Watch(consistent(cmd.Context()), src.Snapshot, watchview.Options{
				Out: a.stdout, TTY: watchview.IsTerminal(a.stdout), Width: width,
				Interval: watchInterval, Timeout: timeout, Follow: follow, Laggards: laggards, Attempt: src.Attempt,
			})
			return err
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0, the default: never)")
	c.Flags().BoolVar(&follow, "follow", false, "keep watching after the resource is Ready (until Ctrl+C)")
	c.Flags().IntVar(&laggards, "show", 5, "how many slow or failing children to show")
	cmd.AddCommand(c)
	return cmd
}
