package integration

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/model/modeltest"
)

// TestLatticeGoAndDatabaseAgree runs every lattice case through both halves:
// model.ValidateManifest and the kind_manifest_legal trigger, written
// around the API straight into kind_manifest. Each must accept or refuse
// exactly what the other does.
func TestLatticeGoAndDatabaseAgree(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	for i, tc := range modeltest.LatticeCases() {
		m := tc.Manifest
		goErr := model.ValidateManifest(&m)
		reactions, _ := json.Marshal(m.Reactions)
		if m.Reactions == nil {
			reactions = []byte(`[]`)
		}
		_, dbErr := e.db.Pool.Exec(context.Background(),
			`INSERT INTO kind_manifest (kind, kind_version, reactions, finalizer_name) VALUES ($1, $2, $3, $4)`,
			m.Kind, i+1, reactions, m.FinalizerName)
		if (goErr == nil) != (dbErr == nil) {
			t.Errorf("%s: Go says %v, the database says %v", tc.Name, goErr, dbErr)
		}
	}
}
