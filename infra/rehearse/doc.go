// Package rehearse deploys the CDK stack and the SAM template (translated by
// scripts/sam-translate.py) into moto_server's CloudFormation, checks what it
// created through the services' own APIs, updates both stacks with a changed
// parameter and deletes them: `make rehearse-aws`. Its test runs only when
// REHEARSE_AWS=1, so `make test-infra` compiles it without running it.
//
// moto does not emulate every resource type. Before a deploy, one probe stack
// per type asks moto which types it creates; a resource of any other type is
// left out of the deployed template, and each Ref or Fn::GetAtt on it becomes
// a placeholder value (see standIn). The test logs those types and writes
// them, with the resources left out, to REHEARSE_REPORT when set.
package rehearse
