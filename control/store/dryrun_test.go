package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/convergeplane/converge/control/store"
)

// TestDryRunStatementFails: under a dry run, a statement that fails (the
// unique violation CreateEndpoint turns into a *ConflictError) leaves the
// dry run's transaction usable, as a failed statement leaves the pool: the
// dry run goes on to write and read back what it wrote, and when it ends,
// nothing it wrote is left and no secret was shown.
func TestDryRunStatementFails(t *testing.T) {
	t.Parallel()
	b := endpointSetup(t)
	if _, _, err := b.st.CreateEndpoint(b.ctx, b.box, endpointParams("first")); err != nil {
		t.Fatal(err)
	}
	err := b.st.DryRun(b.ctx, func(ctx context.Context) error {
		if !store.IsDryRun(ctx) {
			t.Error("IsDryRun is false inside DryRun")
		}
		var ce *store.ConflictError
		if _, _, err := b.st.CreateEndpoint(ctx, b.box, endpointParams("first")); !errors.As(err, &ce) {
			t.Errorf("creating an existing endpoint: %v, want a *ConflictError", err)
		}
		_, secret, err := b.st.CreateEndpoint(ctx, b.box, endpointParams("second"))
		if err != nil {
			return err
		}
		if secret != "" {
			t.Errorf("a dry run returned the generated secret %q", secret)
		}
		if _, err := b.st.GetEndpoint(ctx, "second"); err != nil {
			t.Errorf("the dry run cannot read back what it wrote: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if store.IsDryRun(b.ctx) {
		t.Error("IsDryRun is true outside DryRun")
	}
	var nf *store.NotFoundError
	if _, err := b.st.GetEndpoint(b.ctx, "second"); !errors.As(err, &nf) {
		t.Errorf("after the dry run, the endpoint it created: %v, want a *NotFoundError", err)
	}
}
