// Package model is the vocabulary of the control plane: kind manifests and
// their reactions, the closed trigger and outcome sets, the legality lattice
// that decides which reaction sets a kind may declare, and the request and
// outcome a task carries.
//
// A kind is pure data. The core never reads a kind name; it routes work by
// the (Trigger, Emits) masks of the kind's reactions and by the exact
// (kind, kind_version) a resource pins. ValidateManifest is the Go half of the
// lattice; the database's kind_manifest_legal trigger is the other half, so
// a bad manifest cannot be stored even by a writer that bypasses the API. The
// two must agree rule for rule.
package model
