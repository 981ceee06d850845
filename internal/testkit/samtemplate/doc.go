// Package samtemplate holds the structural checks on the SAM template at the
// repository root (template.yaml); cfn-lint checks it against the
// CloudFormation schema (make check-sam), these tests check what the schema
// cannot: least privilege and the Function URL's auth.
package samtemplate
