package main

import (
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// suppress records on one CloudFormation resource (c, or the resource an L2
// construct c wraps) that a cdk-nag rule does not apply there, and why:
// stack_test.go lists every suppression. appliesTo narrows it to the named
// findings, e.g. "Resource::*" of AwsSolutions-IAM5.
func suppress(c constructs.IConstruct, rule, reason string, appliesTo ...string) {
	if d := c.Node().DefaultChild(); d != nil {
		c = d
	}
	s := &cdknag.NagPackSuppression{Id: jsii.String(rule), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		a := make([]any, len(appliesTo))
		for i, v := range appliesTo {
			a[i] = v
		}
		s.AppliesTo = &a
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{s}, jsii.Bool(false))
}
