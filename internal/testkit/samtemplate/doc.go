// Package samtemplate holds the structural checks on the SAM template at the
// repository root (template.yaml); cfn-lint checks it against the
// CloudFormation schema and scripts/cfn-lint-rules (make check-sam), these
// tests check what those cannot: least privilege of the invoker and execution
// roles, every function's architecture, and the Function URLs' auth.
package samtemplate
