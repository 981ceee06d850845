// Package schema compiles and enforces the JSON Schemas that kind manifests
// embed for a resource's spec, status and config, and decides whether an
// edit of a published schema is safe to apply in place.
//
// # Schemas and untyped axes
//
// Each kind version carries up to three inline draft 2020-12 schemas, one
// per axis (spec, status, config). Compile turns one into a *Schema; $schema
// may be omitted and format is an annotation, as 2020-12 specifies. An axis
// without a schema (nil, empty or null) is untyped: Compile returns a nil
// *Schema, and a nil *Schema accepts every document. Validate reports every
// leaf failure as a Violation with a JSON pointer into the document and the
// failing keyword, so the API can answer with field errors.
//
// # No loading, ever
//
// Schemas come from operators, so everything they name is untrusted. The
// compiler's loader refuses every URL: a $ref to http(s), file or any other
// document outside the schema fails at compile time with ErrExternalRef.
// Otherwise a manifest could make the control plane fetch internal endpoints
// (SSRF, such as cloud metadata) or read local files and echo them back in
// validation errors. References inside the document ($defs, anchors, JSON
// pointers) work, and so does the 2020-12 metaschema, which the library
// embeds. Shared definitions must be inlined under $defs.
//
// # Registry
//
// Compiling checks the metaschema and resolves every reference, far more work
// than validating, so compiled schemas are cached per (kind, kind_version) in
// a Registry. Validation happens on every apply, so Get is lock-free: writers
// copy the map and swap it atomically. The loop that refreshes the registry
// from the database lives elsewhere and calls Replace with the full set.
//
// # The stability gate
//
// A published kind_version is a contract: every stored resource of that
// version must stay valid. Diff compares the old and new schema documents
// and lists breaking changes (a new required property, a narrowed enum, a
// lowered maximum, a closed object...) and additive ones (a new optional
// property on a closed object, a widened bound, a dropped requirement...).
// A breaking change must be published as a new kind_version instead.
//
// The gate is sound, not complete: if Diff reports no breaking change, every
// document valid under the old schema is valid under the new one. Whenever
// it cannot prove that (a change inside allOf, anyOf, oneOf, not, if, $ref,
// patternProperties and other keywords it does not model, or a widening that
// a $ref inside not could turn into a narrowing) it reports the change as
// breaking. Being too strict costs an operator a new kind_version; being too
// lenient would break stored resources. One consequence: adding a property
// to an object that is not closed (additionalProperties is not false) is
// breaking, since an existing document may already hold that name with a
// value the new property rejects.
package schema
