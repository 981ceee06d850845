// Package model is the vocabulary of the control plane: kind manifests and
// their reactions, the outcome parts a reaction may emit (the emits mask),
// the legality lattice that decides which reaction sets a kind may declare,
// resource rows and their phases, and the claimed task row the engine
// fences on.
//
// The wire protocol is not here: the task envelope, the outcome, the result
// and the trigger, transition and task type values are webhooksdk's types
// (docs/protocol.md), which the server uses directly, and webhooksdk's
// MergeConfig is the one provider-config merge. The server may import the
// SDK; the SDK never imports the server.
//
// A kind is pure data. The core never reads a kind name; it routes work by
// the (Trigger, Emits) masks of the kind's reactions and by the exact
// (kind, kind_version) a resource pins. ValidateManifest is the Go half of the
// lattice; the database's kind_manifest_legal trigger is the other half, so
// a bad manifest cannot be stored even by a writer that bypasses the API. The
// two must agree rule for rule.
package model
